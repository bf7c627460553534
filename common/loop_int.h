/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The loop's private state, shared by loop.c (run, dispatch, destroy), loop_ops.c (the
 * submit functions) and loop_timer.c (the timer heap). Nothing outside common/loop*.c includes it.
 */
#ifndef FERRY_COMMON_LOOP_INT_H
#define FERRY_COMMON_LOOP_INT_H

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>

#include "common/loop.h"

#define LOOP_LOG "loop"

/*
 * user_data of an SQE: the request's address with a tag in the low bits (requests are 8-byte
 * aligned), or UD_IGNORE for SQEs whose CQE only needs counting (cancels).
 */
#define UD_IGNORE 0ull
#define TAG_MAIN 0ull
#define TAG_LINK_TIMEOUT 1ull
#define TAG_MASK 7ull

/* ferry__loop_req.flags */
#define REQ_MULTISHOT (1u << 0) /* accept/poll: re-armed, intermediate callbacks */
#define REQ_CANCELING (1u << 1) /* a cancel was sent; do not re-arm */
#define REQ_TIMED_OUT (1u << 2) /* connect: the linked timeout fired */
#define REQ_OVERRIDE (1u << 3)	/* an injected fault ended it: final result is req->result */
#define REQ_INTERNAL (1u << 4)	/* the loop's own (wake read): exempt from faults, destroy */

struct loop_fault {
	unsigned count;	   /* completions still to alter */
	int result;	   /* replacement result or 0 */
	unsigned delay_ms; /* hold time or 0 */
};

struct ferry__loop {
	struct io_uring ring;		     /* the ring */
	unsigned inflight;		     /* SQEs whose final CQE is still owed */
	unsigned cqe_batch;		     /* CQEs handled per pass before timers run again */
	bool ring_enabled;		     /* false until the first run in single-issuer mode */
	bool running;			     /* inside ferry__loop_run() */
	bool destroying;		     /* inside ferry__loop_destroy() */
	atomic_bool stop_requested;	     /* set by ferry__loop_stop(), any thread */
	int wake_fd;			     /* eventfd written by post/stop from other threads */
	uint64_t wake_value;		     /* the wake read's target */
	struct ferry__loop_req wake_req;     /* the pending read on wake_fd */
	pthread_mutex_t post_lock;	     /* guards the three fields below */
	struct ferry__loop_post *post_head;  /* FIFO of posted callbacks */
	struct ferry__loop_post **post_tail; /* where the next post is linked */
	bool posts_closed;		     /* destroy began: refuse new posts */
	struct ferry__loop_timer *timers;    /* pairing heap root, earliest first */
	uint64_t timer_seq;		     /* next timer start sequence number */
	struct loop_fault faults[FERRY_LOOP_OP_COUNT]; /* armed fault per operation */
	atomic_bool awake;			       /* in run and not asleep in the kernel */
	atomic_bool posted;			       /* a post may wait in the queue */
	uint64_t spin_ns;			       /* busy-poll window, 0 = off */
	atomic_bool spin_gives_way;		       /* ferry__loop_spin_give_way() */
	uint64_t last_busy_ns;			       /* when a pass last had completions */
	uint64_t spins;				       /* passes that found work by polling */
	int (*poller)(void *arg, bool sleeping);       /* ferry__loop_set_poller() */
	void *poller_arg;			       /* " */
};

/* loop_ops.c: an SQE with @n free slots behind it (flushes a full SQ), or NULL; re-submit a
 * multishot request the kernel ended (0 or -errno). */
struct io_uring_sqe *ferry__loop_sqe(struct ferry__loop *loop, unsigned n);
int ferry__loop_rearm(struct ferry__loop *loop, struct ferry__loop_req *req);

/* loop.c: handle one CQE. */
void ferry__loop_dispatch(struct ferry__loop *loop, uint64_t user_data, int res, unsigned flags);

/* loop_timer.c */
/* ferry__loop_timers_run() - fire due timers; ferry__loop_timers_wait_ns() - ns until the next
 * (0 if one is due, UINT64_MAX if none); ferry__loop_timers_cancel_all() - -ECANCELED to all. */
void ferry__loop_timers_run(struct ferry__loop *loop);
uint64_t ferry__loop_timers_wait_ns(struct ferry__loop *loop);
void ferry__loop_timers_cancel_all(struct ferry__loop *loop);

#endif
