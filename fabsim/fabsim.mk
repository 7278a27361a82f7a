# fabsim: simulated hardware providers (libfabric DL providers) and their
# rule tests.  Included from the top Makefile, or standalone:
#   make -f fabsim/fabsim.mk B=build [CC=clang]
# Targets: fabsim (one library per profile), fabsim-tests (the rules
#          program), fabsim-check (tests/fabsim/run.sh), fabsim-clean.

CC     ?= gcc
B      ?= build
CFLAGS ?= -O2 -g
FABSIM_PROFILES ?= efa psm3 opx cxi
FABSIM_WARN := -Wall -Wextra -Wmissing-prototypes -Wshadow -Wformat=2 -Werror
FABSIM_FABRIC_CFLAGS := $(shell pkg-config --cflags libfabric 2>/dev/null)
FABSIM_FABRIC_LIBS   := $(shell pkg-config --libs libfabric 2>/dev/null || echo -lfabric)
FABSIM_CMOCKA_LIBS   := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)
FABSIM_CFLAGS = -std=c11 -D_GNU_SOURCE $(CPPFLAGS) $(FABSIM_WARN) $(CFLAGS) -pthread \
		$(FABSIM_FABRIC_CFLAGS)

# common sources; each library adds its fabsim/profile_<name>.c
FABSIM_SRCS := fabsim/profile.c fabsim/init.c fabsim/domain.c fabsim/mr.c \
	       fabsim/cq.c fabsim/ep.c fabsim/rma.c
FABSIM_HDRS := fabsim/fabsim.h
FABSIM_LIBS := $(foreach p,$(FABSIM_PROFILES),$(B)/fabsim/libsim_$(p)-fi.so)
FABSIM_RULES := $(B)/tests/fabsim_rules

.PHONY: fabsim fabsim-tests fabsim-check fabsim-clean

fabsim: $(FABSIM_LIBS)
fabsim-tests: $(FABSIM_LIBS) $(FABSIM_RULES)

$(B)/fabsim/libsim_%-fi.so: fabsim/profile_%.c $(FABSIM_SRCS) $(FABSIM_HDRS) fabsim/fabsim.mk
	@mkdir -p $(@D)
	$(CC) $(FABSIM_CFLAGS) -fPIC -fvisibility=hidden -shared \
		-Wl,--no-undefined -o $@ $(FABSIM_SRCS) $< $(LDFLAGS) \
		$(FABSIM_FABRIC_LIBS) -pthread

$(FABSIM_RULES): tests/fabsim/rules.c fabsim/fabsim.mk
	@mkdir -p $(@D)
	$(CC) $(FABSIM_CFLAGS) -o $@ tests/fabsim/rules.c $(LDFLAGS) \
		$(FABSIM_FABRIC_LIBS) $(FABSIM_CMOCKA_LIBS)

fabsim-check: fabsim-tests
	B=$(B) tests/fabsim/run.sh

fabsim-clean:
	rm -rf $(B)/fabsim $(FABSIM_RULES)
