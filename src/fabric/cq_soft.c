/*
 * Software CQs: a queue of completions the fabric layer fills itself, read
 * and waited on through the same dfi_cq calls as a provider's CQ.  The RDM
 * backend's shared receive contexts (rdm/srx.c) have one provider CQ for
 * all their endpoints, while the DAT layer tells an SRQ completion's EP by
 * the private CQ it reads it from (srq.c): each such private CQ is a soft
 * one, and a read or try-wait of any of them first has the feeder move
 * what its provider CQ holds to the soft CQs of the endpoints it names.
 *
 * The fd to sleep on is an epoll set of an eventfd, readable while the
 * queue holds completions, and of the feeder's fd, readable while its
 * provider CQ may hold some (for anyone's endpoint: the reader pulls, and
 * the one it was for sees its eventfd).  A polled feeder has no fd.
 */
#include "fabric_int.h"
#include "util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct dfi_cq_soft {
	pthread_mutex_t lock;
	struct dfi_comp *ring;		/* ring[head..head+n) modulo cap */
	size_t head, n, cap;
	int efd;
	const struct dfi_cq_feed *feed;
	void *arg;
};

int dfi_cq_soft_open(struct dfi_fabric *f, size_t size, int feed_fd,
		     const struct dfi_cq_feed *feed, void *arg, struct dfi_cq **out)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct dfi_cq *c = calloc(1, sizeof(*c));
	struct dfi_cq_soft *s = calloc(1, sizeof(*s));
	int rc = -ENOMEM;

	if (!c || !s)
		goto err;
	s->efd = -1;
	c->fd = -1;
	c->fabric = f->fabric;
	c->owner = f;
	c->soft = s;
	pthread_mutex_init(&s->lock, NULL);
	s->feed = feed;
	s->arg = arg;
	s->cap = size ? size : 64;
	if (!(s->ring = calloc(s->cap, sizeof(*s->ring))))
		goto err;
	if ((s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    (c->fd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    epoll_ctl(c->fd, EPOLL_CTL_ADD, s->efd, &ev) ||
	    (feed_fd >= 0 && epoll_ctl(c->fd, EPOLL_CTL_ADD, feed_fd, &ev))) {
		rc = -errno;
		dfi_err(DFI_SS_FABRIC, "a software CQ's fd: %s", strerror(errno));
		goto err;
	}
	*out = c;
	return 0;
err:
	if (c && s) {
		dfi_cq_soft_close(c);
		free(c);
	} else {
		free(c);
		free(s);
	}
	return rc;
}

void dfi_cq_soft_close(struct dfi_cq *c)
{
	struct dfi_cq_soft *s = c->soft;

	if (s->efd >= 0)
		close(s->efd);
	if (c->fd >= 0)
		close(c->fd);
	free(s->ring);
	pthread_mutex_destroy(&s->lock);
	free(s);
	c->soft = NULL;
}

/* The queue grows rather than drops: a completion stands for a consumer's
 * buffer, and the DAT layer counts every one it is owed. */
int dfi_cq_soft_push(struct dfi_cq *c, const struct dfi_comp *comp)
{
	struct dfi_cq_soft *s = c->soft;
	uint64_t one = 1;
	bool was_empty;

	pthread_mutex_lock(&s->lock);
	if (s->n == s->cap) {
		struct dfi_comp *r = malloc(2 * s->cap * sizeof(*r));

		if (!r) {
			pthread_mutex_unlock(&s->lock);
			return -ENOMEM;
		}
		for (size_t i = 0; i < s->n; i++)
			r[i] = s->ring[(s->head + i) % s->cap];
		free(s->ring);
		s->ring = r;
		s->head = 0;
		s->cap *= 2;
	}
	s->ring[(s->head + s->n) % s->cap] = *comp;
	was_empty = s->n++ == 0;
	pthread_mutex_unlock(&s->lock);
	if (was_empty && write(s->efd, &one, sizeof(one)) != sizeof(one))
		dfi_warn(DFI_SS_FABRIC, "a software CQ's eventfd: %s", strerror(errno));
	return 0;
}

int dfi_cq_soft_read(struct dfi_cq *c, struct dfi_comp *out, int n)
{
	struct dfi_cq_soft *s = c->soft;
	int got = 0;

	s->feed->pull(s->arg);
	pthread_mutex_lock(&s->lock);
	while (got < n && s->n) {
		out[got++] = s->ring[s->head];
		s->head = (s->head + 1) % s->cap;
		s->n--;
	}
	pthread_mutex_unlock(&s->lock);
	return got;
}

/* The eventfd is emptied before the queue is looked at: a push after that
 * look sets it again, so a sleeper never misses one. */
int dfi_cq_soft_trywait(struct dfi_cq *c)
{
	struct dfi_cq_soft *s = c->soft;
	uint64_t v;
	size_t n;
	int rc;

	s->feed->pull(s->arg);
	if (read(s->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		dfi_warn(DFI_SS_FABRIC, "a software CQ's eventfd: %s", strerror(errno));
	pthread_mutex_lock(&s->lock);
	n = s->n;
	pthread_mutex_unlock(&s->lock);
	if (n) {
		v = 1;	/* the fd stays readable while completions wait */
		if (write(s->efd, &v, sizeof(v)) != sizeof(v))
			dfi_warn(DFI_SS_FABRIC, "a software CQ's eventfd: %s", strerror(errno));
		return -EAGAIN;
	}
	rc = s->feed->trywait(s->arg);
	if (rc)
		return rc;
	/* pulled by another reader meanwhile, for this one: its eventfd is
	 * set again, but say so now */
	pthread_mutex_lock(&s->lock);
	n = s->n;
	pthread_mutex_unlock(&s->lock);
	return n ? -EAGAIN : 0;
}
