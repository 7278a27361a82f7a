#!/bin/sh
# Install the Debian 12 packages dapl-ofi needs to build and test, when
# missing (cmake and patch: tests/apps/pscom.sh builds pscom).  As root:
# apt-get installs them.  Otherwise: say which.
#   scripts/deps.sh [deb] [lint]
# deb: also what `make deb` needs; lint: also lintian (tests/package/deb.sh).
set -e
PKGS="make gcc clang pkg-config libdapl-dev dapl2-utils libfabric-dev libfabric-bin \
libcmocka-dev spin valgrind iproute2 procps cmake patch"
for set in "$@"; do
	case $set in
	deb) PKGS="$PKGS build-essential debhelper dpkg-dev" ;;
	lint) PKGS="$PKGS lintian" ;;
	*) echo "deps.sh: unknown set '$set' (deb, lint)" >&2; exit 2 ;;
	esac
done
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
	echo "dapl-ofi: installing missing packages:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends $missing >/dev/null
else
	echo "dapl-ofi: missing packages:$missing" >&2
	echo "dapl-ofi: run:  sudo apt-get install$missing" >&2
	exit 1
fi
