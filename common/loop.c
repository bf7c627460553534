/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The io_uring event loop: lifecycle, the run loop, cross-thread posts, completion dispatch,
 * cancellation and fault injection. The submit functions live in loop_ops.c, timers in
 * loop_timer.c.
 *
 * DESIGN
 * Thread model. One thread runs ferry__loop_run(); every callback runs there. Other threads
 * touch only the post queue (a mutex-protected FIFO, written rarely: cross-thread hand-offs, not
 * the data path) and the stop flag (an atomic); both then write an eventfd on which the loop
 * keeps one read pending, so a sleeping loop wakes. The eventfd is written under the post lock,
 * and destroy closes the queue under the same lock, so a post either lands in the queue (and is
 * run, or cancelled by destroy) or is refused: none is lost, also when racing with stop.
 *
 * A post wakes the loop only when it may be asleep: the poster sets `posted`, then writes the
 * eventfd unless the loop is `awake`; the loop clears `awake`, then looks at `posted` before it
 * sleeps (both sequentially consistent, so one of the two sees the other), and runs the queue
 * itself at the end of every pass where `posted` is set. A busy or busy-polling loop so takes
 * posts with no eventfd write on the poster's side and no read completion on its own.
 *
 * One pass of run: fire due timers; submit queued SQEs and sleep in io_uring_enter until a
 * completion arrives or the earliest timer is due (timers are a user-space heap, so the kernel
 * sees one wait timeout, not one object per timer); dispatch up to one CQ ring's worth of CQEs.
 * SQEs are batched: a submit function only fills an SQE; the enter of the next pass submits them
 * all (or an earlier flush when the SQ ring is full).
 *
 * Request lifetime. user_data of each SQE is the address of the caller's request struct (tagged
 * in the low bits for a connect's linked timeout). A request counts the CQEs the kernel still
 * owes it (a CQE with IORING_CQE_F_MORE promises another): 1 for most operations, 2 for a connect
 * with a linked timeout (both CQEs come, in either order), 2 for a zero-copy send (the result,
 * flagged F_MORE, then the F_NOTIF notification). The final callback runs when the count reaches
 * zero, so the caller may free the request in it: the kernel no longer knows its address. The
 * loop counts owed CQEs globally too (inflight), which is what destroy waits for.
 *
 * Cancellation. ferry__loop_cancel() sends IORING_OP_ASYNC_CANCEL keyed by the request's address;
 * the cancel's own CQE carries user_data 0 and is only counted, so it may arrive after the
 * request was freed. The cancelled request completes normally, with -ECANCELED (or its result if
 * it won the race). A multishot request marked cancelling is not re-armed and drops further
 * results. Destroy sends one IORING_ASYNC_CANCEL_ANY|ALL, waits for every owed CQE (re-sending
 * the cancel while any are missing), forces every final result to -ECANCELED, fires active timers
 * and unrun posts with -ECANCELED, and repeats until nothing is left, since those callbacks may
 * cancel more (they may not submit: submit functions fail with -ECANCELED during destroy).
 *
 * Receive buffers. The loop offers plain recv/recvmsg into a caller's buffer and no provided
 * buffer rings: the framed connection (conn.c) needs each frame contiguous for the verifier and
 * grows its own buffer to the frame anyway, so a ring would add a copy for any frame that
 * straddles ring buffers and a refill protocol, to save what plain recv costs an idle connection:
 * one small receive buffer (conn.c shrinks it back after large frames).
 *
 * Busy poll (opts.spin_us). A sleeping loop costs a wake-up per message: on these machines
 * ~5-50 us each, on a TCG VM ~100 us, which is most of a small request's latency. With a spin
 * window the loop, after a pass that had completions, polls (an io_uring_enter that submits and
 * runs task work without waiting, then sched_yield() so other runnable threads on the CPU go
 * first) until a completion arrives, a timer is due or the window has passed since the last
 * completion; only then does it sleep. A burst of requests is served without wake-ups and an
 * idle loop still sleeps: the CPU is spent only while there is traffic. Posts still write the
 * eventfd (the spinning loop reaps that read like any completion), so nothing changes for
 * other threads.
 *
 * Fault injection alters the next completion(s) of one operation type where the loop delivers
 * them (replace the result, hold the callback on a timer), so the caller sees exactly what a real
 * failure would give it, through the same callbacks.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/loop_int.h"
#include "common/util.h"

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAVE_MEMCHECK 1
#endif
#endif

/* A completion held back by an injected delay. */
struct loop_hold {
	struct ferry__loop_timer timer; /* fires the delivery */
	struct ferry__loop_req *req;	/* the held request */
	int result;			/* what it will be given */
};

static void deliver(struct ferry__loop_req *req, int result)
{
	ferry__loop_cb cb = req->cb;

	req->loop = NULL;
	req->flags = 0;
	cb(req, result);
}

void ferry__loop_mark_defined(const void *buf, size_t len)
{
#ifdef HAVE_MEMCHECK
	(void)VALGRIND_MAKE_MEM_DEFINED(buf, len);
#else
	(void)buf;
	(void)len;
#endif
}

static void mark_msg(const struct msghdr *msg, size_t bytes)
{
	for (size_t i = 0; i < msg->msg_iovlen && bytes; i++) {
		size_t n = msg->msg_iov[i].iov_len < bytes ? msg->msg_iov[i].iov_len : bytes;

		ferry__loop_mark_defined(msg->msg_iov[i].iov_base, n);
		bytes -= n;
	}
	if (msg->msg_control && msg->msg_controllen)
		ferry__loop_mark_defined(msg->msg_control, msg->msg_controllen);
	if (msg->msg_name && msg->msg_namelen)
		ferry__loop_mark_defined(msg->msg_name, msg->msg_namelen);
}

/* ---- posts and wake-ups ---- */

static void wake(struct ferry__loop *loop)
{
	uint64_t one = 1;

	/* EAGAIN (counter saturated) still leaves the loop woken. */
	if (write(loop->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		FLOG_ERROR(LOOP_LOG, "eventfd write: %s", ferry_strerror(-errno));
}

static void run_posts(struct ferry__loop *loop, int status)
{
	struct ferry__loop_post *p, *next;

	pthread_mutex_lock(&loop->post_lock);
	p = loop->post_head;
	loop->post_head = NULL;
	loop->post_tail = &loop->post_head;
	pthread_mutex_unlock(&loop->post_lock);
	for (; p; p = next) {
		void (*fn)(void *, int) = p->fn;
		void *arg = p->arg;

		next = p->next;
		/* An embedded post is its owner's again once fn starts: fn may post it anew. */
		if (!p->embedded)
			ferry__free(p);
		fn(arg, status);
	}
}

/* Queue @p (fn and arg set): 0, or -ECANCELED once destroy has begun. */
static int enqueue_post(struct ferry__loop *loop, struct ferry__loop_post *p)
{
	p->next = NULL;
	pthread_mutex_lock(&loop->post_lock);
	if (loop->posts_closed) {
		pthread_mutex_unlock(&loop->post_lock);
		return -ECANCELED;
	}
	/* Only the first post into an empty queue wakes, and only a loop that may be asleep:
	 * the loop drains the whole queue (see DESIGN). */
	if (!loop->post_head) {
		atomic_store(&loop->posted, true);
		if (!atomic_load(&loop->awake))
			wake(loop);
	}
	*loop->post_tail = p;
	loop->post_tail = &p->next;
	pthread_mutex_unlock(&loop->post_lock);
	return 0;
}

int ferry__loop_post(struct ferry__loop *loop, void (*fn)(void *arg, int status), void *arg)
{
	struct ferry__loop_post *p = ferry__malloc(sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	p->fn = fn;
	p->arg = arg;
	p->embedded = false;
	ret = enqueue_post(loop, p);
	if (ret < 0)
		ferry__free(p);
	return ret;
}

int ferry__loop_post_embedded(struct ferry__loop *loop, struct ferry__loop_post *post,
			      void (*fn)(void *arg, int status), void *arg)
{
	post->fn = fn;
	post->arg = arg;
	post->embedded = true;
	return enqueue_post(loop, post);
}

static int arm_wake(struct ferry__loop *loop);

static void on_wake(struct ferry__loop_req *req, int result)
{
	struct ferry__loop *loop = req->data;
	int ret;

	if (loop->destroying)
		return;
	if (result < 0 && result != -EAGAIN)
		FLOG_WARN(LOOP_LOG, "wake read: %s", ferry_strerror(result));
	run_posts(loop, 0);
	ret = arm_wake(loop);
	if (ret < 0)
		FLOG_ERROR(LOOP_LOG, "cannot re-arm the wake read: %s", ferry_strerror(ret));
}

static int arm_wake(struct ferry__loop *loop)
{
	struct io_uring_sqe *sqe;
	int err;

	sqe = ferry__loop_raw(loop, &loop->wake_req, on_wake, &err);
	if (!sqe)
		return err;
	io_uring_prep_read(sqe, loop->wake_fd, &loop->wake_value, sizeof(loop->wake_value), 0);
	loop->wake_req.flags |= REQ_INTERNAL;
	return 0;
}

void ferry__loop_stop(struct ferry__loop *loop)
{
	atomic_store_explicit(&loop->stop_requested, true, memory_order_release);
	wake(loop);
}

int ferry__loop_submit(struct ferry__loop *loop)
{
	int ret;

	if (!loop->ring_enabled)
		return 0; /* not run yet: the first pass submits */
	ret = io_uring_submit(&loop->ring);
	return ret < 0 ? ret : 0;
}

/* ---- completion dispatch ---- */

static void on_hold_done(struct ferry__loop_timer *timer, int status)
{
	struct loop_hold *h = timer->data;
	struct ferry__loop_req *req = h->req;
	int result = status < 0 ? -ECANCELED : h->result;

	req->delay = NULL;
	ferry__free(h);
	deliver(req, result);
}

/* Hold @req's final callback for @delay_ms. Returns 0, or -ENOMEM: deliver it now. */
static int hold(struct ferry__loop *loop, struct ferry__loop_req *req, int result,
		unsigned delay_ms)
{
	struct loop_hold *h = ferry__calloc(1, sizeof(*h));

	if (!h) {
		FLOG_WARN(LOOP_LOG, "no memory to delay a completion; delivering it now");
		return -ENOMEM;
	}
	h->req = req;
	h->result = result;
	h->timer.data = h;
	if (ferry__loop_timer_start(loop, &h->timer, delay_ms, 0, on_hold_done) < 0) {
		ferry__free(h);
		return -ECANCELED;
	}
	req->delay = h;
	return 0;
}

/* Consume one armed fault for @op; returns it, or NULL when none is armed. */
static const struct loop_fault *take_fault(struct ferry__loop *loop, unsigned op)
{
	struct loop_fault *f = &loop->faults[op];

	if (!f->count)
		return NULL;
	f->count--;
	return f;
}

static void finish(struct ferry__loop *loop, struct ferry__loop_req *req)
{
	const struct loop_fault *f;
	int result = req->result;

	if ((req->flags & REQ_TIMED_OUT) && result == -ECANCELED)
		result = -ETIMEDOUT;
	if (req->flags & REQ_INTERNAL) {
		deliver(req, result);
		return;
	}
	if (loop->destroying) {
		deliver(req, req->op == FERRY_LOOP_OP_CLOSE ? result : -ECANCELED);
		return;
	}
	/* Multishot and zero-copy requests took their fault at their (first) result. */
	if (!(req->flags & (REQ_MULTISHOT | REQ_OVERRIDE)) && req->op != FERRY_LOOP_OP_SEND_ZC &&
	    (f = take_fault(loop, req->op))) {
		if (f->result)
			result = f->result;
		if (f->delay_ms && hold(loop, req, result, f->delay_ms) == 0)
			return;
	}
	deliver(req, result);
}

/* A multishot result (or a raw CQE flagged F_MORE). @last: the kernel ended the multishot. */
static void on_multishot(struct ferry__loop *loop, struct ferry__loop_req *req, int res, bool last)
{
	bool dropping = loop->destroying || (req->flags & (REQ_CANCELING | REQ_OVERRIDE));
	const struct loop_fault *f;
	int ret;

	/* Re-arm first, so that a cancel from the callback below finds the new SQE. */
	if (last && (req->flags & REQ_MULTISHOT)) {
		ret = dropping ? -ECANCELED : ferry__loop_rearm(loop, req);
		if (ret < 0 && !(req->flags & REQ_OVERRIDE))
			req->result = ret;
	}
	if (!dropping && (f = take_fault(loop, req->op)) && f->result) {
		/* The injected error ends the request: cancel it and report the error last. */
		req->result = f->result;
		req->flags |= REQ_OVERRIDE;
		if (req->cqes)
			(void)ferry__loop_cancel(req);
		dropping = true;
	}
	if (dropping) {
		if (req->op == FERRY_LOOP_OP_ACCEPT && res >= 0)
			close(res);
		return;
	}
	req->cb(req, res);
}

static void on_zc_sent(struct ferry__loop *loop, struct ferry__loop_req *req, int res)
{
	const struct loop_fault *f = take_fault(loop, FERRY_LOOP_OP_SEND_ZC);

	if (f && f->result)
		res = f->result;
	req->result = res;
	if (req->sent_cb && !loop->destroying)
		req->sent_cb(req, res);
}

static void on_result(struct ferry__loop *loop, struct ferry__loop_req *req, int res,
		      unsigned cflags)
{
	bool last = !(cflags & IORING_CQE_F_MORE);

	if (req->op == FERRY_LOOP_OP_SEND_ZC) {
		if (!(cflags & IORING_CQE_F_NOTIF))
			on_zc_sent(loop, req, res);
		return;
	}
	if (req->op == FERRY_LOOP_OP_RECV && res > 0)
		ferry__loop_mark_defined(req->buf, (size_t)res);
	else if (req->op == FERRY_LOOP_OP_RECVMSG && res >= 0)
		mark_msg(req->buf, (size_t)res);
	if (!last || ((req->flags & REQ_MULTISHOT) && res >= 0))
		on_multishot(loop, req, res, last);
	else if (!(req->flags & REQ_OVERRIDE))
		req->result = res;
}

void ferry__loop_dispatch(struct ferry__loop *loop, uint64_t user_data, int res, unsigned cflags)
{
	struct ferry__loop_req *req;
	bool last = !(cflags & IORING_CQE_F_MORE);

	if (last)
		loop->inflight--;
	if (user_data == UD_IGNORE)
		return;
	req = (struct ferry__loop_req *)(uintptr_t)(user_data & ~TAG_MASK);
	if (last)
		req->cqes--;
	if ((user_data & TAG_MASK) == TAG_LINK_TIMEOUT) {
		if (res == -ETIME)
			req->flags |= REQ_TIMED_OUT;
	} else {
		on_result(loop, req, res, cflags);
	}
	if (req->cqes == 0 && req->loop && !req->delay)
		finish(loop, req);
}

static unsigned process_cqes(struct ferry__loop *loop)
{
	struct io_uring_cqe *cqe;
	unsigned n = 0;

	while (n < loop->cqe_batch && io_uring_peek_cqe(&loop->ring, &cqe) == 0) {
		uint64_t user_data = cqe->user_data;
		int res = cqe->res;
		unsigned cflags = cqe->flags;

		/* Free the CQ slot before the callback, which may submit and wait. */
		io_uring_cqe_seen(&loop->ring, cqe);
		ferry__loop_dispatch(loop, user_data, res, cflags);
		n++;
	}
	return n;
}

/* ---- cancellation and faults ---- */

static int cancel_sqe(struct ferry__loop *loop, uint64_t key, int fd, unsigned flags)
{
	struct io_uring_sqe *sqe = ferry__loop_sqe(loop, 1);

	if (!sqe)
		return -EAGAIN;
	if (flags & IORING_ASYNC_CANCEL_FD)
		io_uring_prep_cancel_fd(sqe, fd, flags & ~IORING_ASYNC_CANCEL_FD);
	else
		io_uring_prep_cancel64(sqe, key, (int)flags);
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	loop->inflight++;
	return 0;
}

int ferry__loop_cancel(struct ferry__loop_req *req)
{
	struct ferry__loop *loop = req->loop;
	struct loop_hold *h = req->delay;
	int ret;

	if (!loop)
		return -ENOENT;
	if (req->flags & REQ_CANCELING)
		return -EALREADY;
	if (h) {
		/* Held by a fault: the kernel is done with it, deliver -ECANCELED on a 0 ms timer. */
		h->result = -ECANCELED;
		req->flags |= REQ_CANCELING;
		(void)ferry__loop_timer_start(loop, &h->timer, 0, 0, on_hold_done);
		return 0;
	}
	ret = cancel_sqe(loop, (uint64_t)(uintptr_t)req | TAG_MAIN, -1, 0);
	if (ret == 0)
		req->flags |= REQ_CANCELING;
	return ret;
}

int ferry__loop_cancel_fd(struct ferry__loop *loop, int fd)
{
	if (fd < 0)
		return -EBADF;
	return cancel_sqe(loop, 0, fd, IORING_ASYNC_CANCEL_FD | IORING_ASYNC_CANCEL_ALL);
}

int ferry__loop_inject(struct ferry__loop *loop, const struct ferry__loop_fault *fault)
{
	if (fault->op <= FERRY_LOOP_OP_NONE || fault->op >= FERRY_LOOP_OP_COUNT ||
	    fault->result > 0) {
		FLOG_ERROR(LOOP_LOG, "bad fault: op %d result %d", (int)fault->op, fault->result);
		return -EINVAL;
	}
	loop->faults[fault->op] = (struct loop_fault){fault->count, fault->result, fault->delay_ms};
	return 0;
}

void ferry__loop_spin_give_way(struct ferry__loop *loop)
{
	atomic_store_explicit(&loop->spin_gives_way, true, memory_order_relaxed);
}

unsigned ferry__loop_spin_us(const struct ferry__loop *loop)
{
	return (unsigned)(loop->spin_ns / 1000u);
}

unsigned ferry__loop_inflight(const struct ferry__loop *loop)
{
	return loop->inflight;
}

/* ---- lifecycle and run ---- */

static int setup_ring(struct ferry__loop *loop, unsigned depth, bool single_issuer)
{
	struct io_uring_params params;
	int ret;

	memset(&params, 0, sizeof(params));
	params.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN |
		       IORING_SETUP_TASKRUN_FLAG;
	if (single_issuer)
		params.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
				IORING_SETUP_R_DISABLED;
	params.cq_entries = depth * 4;
	ret = io_uring_queue_init_params(depth, &loop->ring, &params);
	if (ret == -EINVAL && !single_issuer) {
		/* Kernels before 5.19 lack the task-run flags; they are optimisations only. */
		memset(&params, 0, sizeof(params));
		params.flags = IORING_SETUP_CQSIZE;
		params.cq_entries = depth * 4;
		ret = io_uring_queue_init_params(depth, &loop->ring, &params);
	}
	if (ret < 0) {
		FLOG_ERROR(LOOP_LOG, "io_uring_queue_init(%u): %s", depth, ferry_strerror(ret));
		return ret;
	}
	loop->ring_enabled = !single_issuer;
	loop->cqe_batch = params.cq_entries;
	return 0;
}

int ferry__loop_create(const struct ferry__loop_opts *opts, struct ferry__loop **out)
{
	static const struct ferry__loop_opts defaults;
	struct ferry__loop *loop;
	unsigned depth;
	int ret;

	if (!opts)
		opts = &defaults;
	depth = opts->queue_depth ? opts->queue_depth : 256;
	if ((opts->flags & ~FERRY_LOOP_SINGLE_ISSUER) || depth > 32768 ||
	    opts->spin_us > FERRY_LOOP_MAX_SPIN_US) {
		FLOG_ERROR(LOOP_LOG, "bad loop options: flags 0x%x, queue depth %u, spin %u us",
			   opts->flags, depth, opts->spin_us);
		return -EINVAL;
	}
	loop = ferry__calloc(1, sizeof(*loop));
	if (!loop)
		return -ENOMEM;
	ret = setup_ring(loop, depth, opts->flags & FERRY_LOOP_SINGLE_ISSUER);
	if (ret < 0)
		goto err_free_loop;
	loop->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (loop->wake_fd < 0) {
		ret = -errno;
		FLOG_ERROR(LOOP_LOG, "eventfd: %s", ferry_strerror(ret));
		goto err_exit_ring;
	}
	ret = -pthread_mutex_init(&loop->post_lock, NULL);
	if (ret < 0)
		goto err_close_wake;
	loop->post_tail = &loop->post_head;
	loop->spin_ns = (uint64_t)opts->spin_us * 1000u;
	atomic_init(&loop->stop_requested, false);
	atomic_init(&loop->awake, false);
	atomic_init(&loop->posted, false);
	loop->wake_req.data = loop;
	ret = arm_wake(loop);
	if (ret < 0)
		goto err_destroy_lock;
	*out = loop;
	return 0;

err_destroy_lock:
	pthread_mutex_destroy(&loop->post_lock);
err_close_wake:
	close(loop->wake_fd);
err_exit_ring:
	io_uring_queue_exit(&loop->ring);
err_free_loop:
	ferry__free(loop);
	return ret;
}

static int enable_ring(struct ferry__loop *loop)
{
	int ret;

	if (loop->ring_enabled)
		return 0;
	/* liburing 2.3 declares io_uring_enable_rings() but does not export it. */
	ret = (int)syscall(__NR_io_uring_register, loop->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS,
			   NULL, 0);
	if (ret < 0) {
		ret = -errno;
		FLOG_ERROR(LOOP_LOG, "IORING_REGISTER_ENABLE_RINGS: %s", ferry_strerror(ret));
		return ret;
	}
	loop->ring_enabled = true;
	return 0;
}

static bool enter_ok(int ret)
{
	/* -EBUSY/-EAGAIN: the CQ is full or the kernel is short of memory; reaping CQEs helps. */
	return ret >= 0 || ret == -ETIME || ret == -EINTR || ret == -EBUSY || ret == -EAGAIN;
}

/* ---- the process's busy pollers (loop.h) ---- */

static atomic_uint spinners; /* loops in spin() and waiters spinning */
static atomic_uint cpus;     /* ferry__spin_cpus(), 0 until first use */

unsigned ferry__spin_cpus(void)
{
	unsigned n = atomic_load_explicit(&cpus, memory_order_relaxed);
	cpu_set_t set;

	if (n)
		return n;
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = (unsigned)CPU_COUNT(&set);
	if (!n) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		n = c > 0 ? (unsigned)c : 1;
	}
	atomic_store_explicit(&cpus, n, memory_order_relaxed);
	return n;
}

/* Count the caller in if the spinners stay at most @limit with it: true, else false. */
static bool spin_enter_within(unsigned limit)
{
	unsigned n = atomic_load_explicit(&spinners, memory_order_relaxed);

	do {
		if (n + 1 > limit)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&spinners, &n, n + 1, memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

bool ferry__spin_waiter_enter(void)
{
	return spin_enter_within(ferry__spin_cpus());
}

bool ferry__spin_spare_enter(void)
{
	return spin_enter_within(ferry__spin_cpus() - 1);
}

bool ferry__spin_full(void)
{
	return atomic_load_explicit(&spinners, memory_order_relaxed) >= ferry__spin_cpus();
}

bool ferry__spin_crowded(void)
{
	return atomic_load_explicit(&spinners, memory_order_relaxed) > ferry__spin_cpus();
}

/*
 * Crowded waits. Each side's figure is log2 of its typical wait (fixed point, 1/1024ths; 0 =
 * none yet): the mean of its first 8 waits, then a running median: each later wait moves it
 * FERRY__SPIN_MEDIAN_STEP toward itself, however far off it is. A mean, even of logs, let the
 * tail decide: the side taken gets every wait, its p90-p99 ones too (a TCP pull of p50 18 us
 * had p90 27 and p99 215 here), while the other side's figure, fed one wait in 16, stayed where
 * its last few samples left it; one 10x wait moved a mean of logs 33%, more than the two sides
 * differed (18 against 23 us), so the choice flipped to the slower side and back, and the p50
 * of 8 B pulls swung 16-21 us where always spinning gave a steady 18. A median moves 4% per
 * wait, outlier or not. Relaxed atomics: a lost update between two reporting threads only
 * costs the figure one sample.
 */
#define FERRY__SPIN_MEDIAN_STEP 64u /* 1/16 of an octave: 4.4% */
/* The crowded waiters' choice between sleeping [0] and spinning [1] (see the comment above). */
struct spin_choice {
	atomic_uint_fast64_t lg[2]; /* running median of log2(wait), 0 = none yet */
	atomic_uint samples[2];	    /* waits counted in, up to 8 */
	atomic_uint picks;	    /* choices made */
};

static struct spin_choice crowded;

/* log2(@ns) in 1/1024ths, the fraction read linearly off the mantissa (within 0.09 of exact). */
static uint64_t lg_of(uint64_t ns)
{
	unsigned e;

	if (ns < 2)
		return 1; /* distinct from "no figure" */
	e = 63u - (unsigned)__builtin_clzll(ns);
	return (uint64_t)e * 1024u + ((e >= 10 ? ns >> (e - 10) : ns << (10 - e)) & 1023u);
}

bool ferry__spin_crowded_pick(void)
{
	struct spin_choice *c = &crowded;
	unsigned n = atomic_fetch_add_explicit(&c->picks, 1, memory_order_relaxed);
	uint64_t slept = atomic_load_explicit(&c->lg[0], memory_order_relaxed);
	uint64_t spun = atomic_load_explicit(&c->lg[1], memory_order_relaxed);
	unsigned every;
	bool spin;

	if (!slept || !spun)
		return slept != 0; /* a first figure for each side: sleeping first */
	spin = spun < slept;
	/* Sides more than 2x apart (log2 figures 1024 apart): the other side is tried less often. */
	every = (spin ? slept - spun : spun - slept) > 1024 ? FERRY__SPIN_EXPLORE_FAR
							    : FERRY__SPIN_EXPLORE;
	return n % every == every - 1 ? !spin : spin;
}

void ferry__spin_crowded_report(bool spun, uint64_t ns)
{
	struct spin_choice *c = &crowded;
	uint64_t avg = atomic_load_explicit(&c->lg[spun], memory_order_relaxed), lg = lg_of(ns);
	unsigned n = atomic_load_explicit(&c->samples[spun], memory_order_relaxed);

	if (n < 8) {
		atomic_store_explicit(&c->samples[spun], ++n, memory_order_relaxed);
		avg = lg >= avg ? avg + (lg - avg) / n : avg - (avg - lg) / n;
	} else if (lg > avg) {
		avg += lg - avg < FERRY__SPIN_MEDIAN_STEP ? lg - avg : FERRY__SPIN_MEDIAN_STEP;
	} else {
		avg -= avg - lg < FERRY__SPIN_MEDIAN_STEP ? avg - lg : FERRY__SPIN_MEDIAN_STEP;
	}
	atomic_store_explicit(&c->lg[spun], avg ? avg : 1, memory_order_relaxed);
}

uint64_t ferry__spin_crowded_avg(bool spun)
{
	struct spin_choice *c = &crowded;
	uint64_t lg = atomic_load_explicit(&c->lg[spun], memory_order_relaxed);
	unsigned e = (unsigned)(lg >> 10);

	if (!lg)
		return 0;
	/* 2^(e + f/1024), the fraction read back linearly as it was taken. */
	return e >= 10 ? (1024u + (lg & 1023u)) << (e - 10) : (1024u + (lg & 1023u)) >> (10 - e);
}

void ferry__spin_loop_enter(void)
{
	atomic_fetch_add_explicit(&spinners, 1, memory_order_relaxed);
}

void ferry__spin_leave(void)
{
	atomic_fetch_sub_explicit(&spinners, 1, memory_order_relaxed);
}

/*
 * Busy poll: submit and reap without sleeping until a completion is there, a timer is due in
 * @wait_ns, stop is asked, or the spin window since the last busy pass has ended. true: the
 * pass goes on without sleeping (*@ret set); false: sleep.
 */
static bool spin(struct ferry__loop *loop, uint64_t wait_ns, int *ret)
{
	uint64_t now = ferry__now_ns(), end = loop->last_busy_ns + loop->spin_ns;
	bool gives_way = atomic_load_explicit(&loop->spin_gives_way, memory_order_relaxed);
	bool busy = false;

	if (wait_ns != UINT64_MAX && now + wait_ns < end)
		end = now + wait_ns;
	if (!gives_way)
		ferry__spin_loop_enter();
	else if (now >= end || !ferry__spin_spare_enter())
		return false;
	while (now < end) {
		*ret = io_uring_submit_and_get_events(&loop->ring);
		if (loop->poller && enter_ok(*ret) && loop->poller(loop->poller_arg, false) > 0) {
			loop->last_busy_ns = ferry__now_ns();
			busy = true;
			break;
		}
		if (!enter_ok(*ret) || io_uring_cq_ready(&loop->ring) ||
		    atomic_load_explicit(&loop->stop_requested, memory_order_acquire) ||
		    atomic_load_explicit(&loop->posted, memory_order_relaxed)) {
			busy = true;
			break;
		}
		if (gives_way && ferry__spin_full())
			break;
		sched_yield();
		now = ferry__now_ns();
	}
	ferry__spin_leave();
	if (busy && enter_ok(*ret))
		loop->spins++;
	return busy;
}

/* Submit, then sleep until a completion or the next timer. 0, or a fatal -errno. */
static int wait_events(struct ferry__loop *loop)
{
	uint64_t wait_ns = ferry__loop_timers_wait_ns(loop);
	struct __kernel_timespec ts, *tsp = NULL;
	struct io_uring_cqe *cqe;
	bool found;
	int ret = 0;

	if (loop->spin_ns && wait_ns != 0 && !io_uring_cq_ready(&loop->ring)) {
		if (spin(loop, wait_ns, &ret))
			goto out;
		wait_ns = ferry__loop_timers_wait_ns(loop); /* time passed while spinning */
	}
	if (wait_ns == 0 || io_uring_cq_ready(&loop->ring)) {
		ret = io_uring_submit_and_get_events(&loop->ring);
	} else {
		if (wait_ns != UINT64_MAX) {
			ts.tv_sec = (long long)(wait_ns / 1000000000u);
			ts.tv_nsec = (long long)(wait_ns % 1000000000u);
			tsp = &ts;
		}
		/* From here a post writes the eventfd; one that came before is run first. The
		 * poller arms its event and polls once more: work it finds means no sleep. */
		atomic_store(&loop->awake, false);
		found = loop->spin_ns && loop->poller && loop->poller(loop->poller_arg, true) > 0;
		if (found)
			loop->last_busy_ns = ferry__now_ns();
		if (found || atomic_load(&loop->posted))
			ret = io_uring_submit_and_get_events(&loop->ring);
		else
			ret = io_uring_submit_and_wait_timeout(&loop->ring, &cqe, 1, tsp, NULL);
		atomic_store(&loop->awake, true);
	}
out:
	if (enter_ok(ret))
		return 0;
	FLOG_ERROR(LOOP_LOG, "io_uring_enter: %s", ferry_strerror(ret));
	return ret;
}

void ferry__loop_set_poller(struct ferry__loop *loop, int (*poll)(void *arg, bool sleeping),
			    void *arg)
{
	loop->poller = poll;
	loop->poller_arg = arg;
}

/* Dispatch the CQEs that are there and run posts: how many (0 = the pass found nothing). */
static unsigned reap(struct ferry__loop *loop)
{
	unsigned n = process_cqes(loop);

	/* Posts made while the loop was awake: no eventfd write announced them. */
	if (atomic_load_explicit(&loop->posted, memory_order_relaxed) &&
	    atomic_exchange(&loop->posted, false)) {
		run_posts(loop, 0);
		n++;
	}
	if (n && loop->spin_ns)
		loop->last_busy_ns = ferry__now_ns();
	return n;
}

int ferry__loop_run(struct ferry__loop *loop)
{
	int ret = 0;

	if (loop->running || loop->destroying)
		return -EBUSY;
	ret = enable_ring(loop);
	if (ret < 0)
		return ret;
	loop->running = true;
	atomic_store(&loop->awake, true);
	while (!atomic_load_explicit(&loop->stop_requested, memory_order_acquire)) {
		ferry__loop_timers_run(loop);
		if (atomic_load_explicit(&loop->stop_requested, memory_order_acquire))
			break;
		ret = wait_events(loop);
		if (ret < 0)
			break;
		(void)reap(loop);
	}
	atomic_store(&loop->awake, false);
	atomic_store_explicit(&loop->stop_requested, false, memory_order_relaxed);
	loop->running = false;
	return ret;
}

void ferry__loop_thread_run(struct ferry__loop *loop, const char *name, const char *comp)
{
	int ret;

	pthread_setname_np(pthread_self(), name);
	ret = ferry__loop_run(loop);
	if (ret < 0)
		FLOG_ERROR(comp, "the %s loop ended: %s", name, ferry_strerror(ret));
}

/* Wait until the kernel owes nothing, re-sending cancel-all every second while it does. */
static int drain_kernel(struct ferry__loop *loop)
{
	struct __kernel_timespec ts = {.tv_sec = 1};
	struct io_uring_cqe *cqe;
	unsigned waits = 0;
	int ret;

	(void)cancel_sqe(loop, 0, -1, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
	while (loop->inflight) {
		ret = io_uring_submit_and_wait_timeout(&loop->ring, &cqe, 1, &ts, NULL);
		if (ret == -ETIME) {
			if (++waits % 5 == 0)
				FLOG_WARN(LOOP_LOG, "destroy: still waiting for %u completions",
					  loop->inflight);
			(void)cancel_sqe(loop, 0, -1,
					 IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
		} else if (ret < 0 && ret != -EINTR && ret != -EBUSY && ret != -EAGAIN) {
			FLOG_ERROR(LOOP_LOG, "destroy: io_uring_enter: %s; leaking %u requests",
				   ferry_strerror(ret), loop->inflight);
			return ret;
		}
		process_cqes(loop);
	}
	return 0;
}

void ferry__loop_destroy(struct ferry__loop *loop)
{
	if (!loop)
		return;
	if (loop->running) {
		FLOG_ERROR(LOOP_LOG, "ferry__loop_destroy() called inside ferry__loop_run()");
		return;
	}
	pthread_mutex_lock(&loop->post_lock);
	loop->posts_closed = true;
	pthread_mutex_unlock(&loop->post_lock);
	loop->destroying = true;
	if (enable_ring(loop) < 0)
		return;
	/* Callbacks run here may cancel more or hold timers: go round until all is quiet. */
	for (;;) {
		if (loop->inflight) {
			if (drain_kernel(loop) < 0)
				return;
		} else if (loop->timers) {
			ferry__loop_timers_cancel_all(loop);
		} else if (loop->post_head) {
			run_posts(loop, -ECANCELED);
		} else {
			break;
		}
	}
	close(loop->wake_fd);
	io_uring_queue_exit(&loop->ring);
	pthread_mutex_destroy(&loop->post_lock);
	ferry__free(loop);
}
