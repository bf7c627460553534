/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Completion on the caller's loop: ferry_on_ready() callbacks wait on their object, move to
 * the due list when it is ready, and run in ferry_run_completions() on the caller's thread. An
 * eventfd (ferry_completion_fd) is readable exactly while the due list is not empty, so an
 * epoll or io_uring loop polls it instead of blocking in ferry_get.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "runtime/rt.h"

#define COMP "runtime"

int ferry__rt_completion_init(void)
{
	ferry__rt.completion_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ferry__rt.completion_fd < 0) {
		int err = -errno;

		FLOG_ERROR(COMP, "eventfd: %s", ferry_strerror(err));
		return err;
	}
	ferry__rt.due = NULL;
	ferry__rt.due_tail = &ferry__rt.due;
	return 0;
}

/* Callbacks never run are freed: ferry_shutdown ends the promise with the runtime. */
void ferry__rt_completion_fini(void)
{
	while (ferry__rt.due) {
		struct ferry__rt_cb *cb = ferry__rt.due;

		ferry__rt.due = cb->next;
		ferry__free(cb);
	}
	ferry__rt.due_tail = &ferry__rt.due;
	if (ferry__rt.completion_fd >= 0)
		close(ferry__rt.completion_fd);
	ferry__rt.completion_fd = -1;
}

/* Lock held. The eventfd goes readable on the first due callback (one write per batch). */
static void make_due(struct ferry__rt_cb *cb, int status)
{
	bool was_empty = ferry__rt.due == NULL;

	cb->status = status;
	cb->next = NULL;
	*ferry__rt.due_tail = cb;
	ferry__rt.due_tail = &cb->next;
	if (was_empty) {
		uint64_t one = 1;

		if (write(ferry__rt.completion_fd, &one, sizeof(one)) < 0)
			FLOG_WARN(COMP, "completion eventfd: %s", ferry_strerror(-errno));
	}
}

void ferry__rt_completion_fire(struct ferry__rt_obj *o, int status)
{
	while (o->cbs) {
		struct ferry__rt_cb *cb = o->cbs;

		o->cbs = cb->next;
		make_due(cb, status);
	}
}

int ferry_on_ready(const struct ferry_ref *ref, ferry_ready_fn fn, void *arg)
{
	struct ferry__rt_cb *cb;
	struct ferry__rt_obj *o;

	if (!ref || !fn)
		return -EINVAL;
	cb = ferry__calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	cb->fn = fn;
	cb->arg = arg;
	cb->ref = *ref;
	pthread_mutex_lock(&ferry__rt.lock);
	if (!ferry__rt.up) {
		pthread_mutex_unlock(&ferry__rt.lock);
		ferry__free(cb);
		return -ENOTCONN;
	}
	o = ferry__rt_is_self(&ref->owner) ? ferry__rt_obj_find(&ref->id) : NULL;
	if (o && o->state == FERRY__RT_PENDING) {
		cb->next = o->cbs;
		o->cbs = cb;
	} else if (o) {
		make_due(cb, o->state == FERRY__RT_ERROR ? o->status : 0);
	} else if (ferry__rt_is_self(&ref->owner)) {
		make_due(cb, -ENOENT); /* every count on it was dropped */
	} else {
		/* Another owner's: ready now if its store copy is here, else the get will wait. */
		make_due(cb, ferry_plasma_client_contains(ferry__rt.store, &ref->id) == 1
				     ? 0
				     : -EAGAIN);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	return 0;
}

int ferry_completion_fd(void)
{
	int fd;

	pthread_mutex_lock(&ferry__rt.lock);
	fd = ferry__rt.up ? ferry__rt.completion_fd : -ENOTCONN;
	pthread_mutex_unlock(&ferry__rt.lock);
	return fd;
}

int ferry_run_completions(void)
{
	struct ferry__rt_cb *list;
	uint64_t value;
	int ran = 0;

	pthread_mutex_lock(&ferry__rt.lock);
	if (!ferry__rt.up) {
		pthread_mutex_unlock(&ferry__rt.lock);
		return -ENOTCONN;
	}
	list = ferry__rt.due;
	ferry__rt.due = NULL;
	ferry__rt.due_tail = &ferry__rt.due;
	/* Not readable from here on until the next one is due (EAGAIN: it was not). */
	(void)!read(ferry__rt.completion_fd, &value, sizeof(value));
	pthread_mutex_unlock(&ferry__rt.lock);
	while (list) {
		struct ferry__rt_cb *cb = list;

		list = cb->next;
		cb->fn(cb->arg, &cb->ref, cb->status);
		ferry__free(cb);
		ran++;
	}
	return ran;
}
