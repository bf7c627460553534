/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The loop's submit functions: each validates, takes an SQE, preps it with liburing and binds it
 * to the caller's request. Nothing is submitted here; the next pass of the loop submits the batch.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include "common/log.h"
#include "common/loop_int.h"

/* ThreadSanitizer models every fd and sees the closes libc makes, not one io_uring makes: it
 * then takes the fd number's next owner (a pidfd made by a raw syscall, a socket of another
 * thread) as racing with the closed one. The close is announced to it through the syscall
 * hook that its close() interceptor uses. */
#if defined(__SANITIZE_THREAD__)
#define LOOP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOOP_TSAN 1
#endif
#endif
#ifdef LOOP_TSAN
#include <sanitizer/linux_syscall_hooks.h>
#define announce_close(fd) __sanitizer_syscall_pre_close(fd)
#else
#define announce_close(fd) ((void)(fd))
#endif

_Static_assert(_Alignof(struct ferry__loop_req) > TAG_MASK, "user_data tags need 8-byte alignment");

struct io_uring_sqe *ferry__loop_sqe(struct ferry__loop *loop, unsigned n)
{
	int ret;

	if (io_uring_sq_space_left(&loop->ring) < n && loop->ring_enabled) {
		ret = io_uring_submit(&loop->ring);
		if (ret < 0)
			FLOG_WARN(LOOP_LOG, "flushing a full submission queue: %s",
				  ferry_strerror(ret));
	}
	if (io_uring_sq_space_left(&loop->ring) < n)
		return NULL;
	return io_uring_get_sqe(&loop->ring);
}

/* Validate and reset @req for a new operation taking @nsqe SQEs; the first is in *@sqe. */
static int start(struct ferry__loop *loop, struct ferry__loop_req *req, enum ferry__loop_op op,
		 int fd, ferry__loop_cb cb, unsigned nsqe, struct io_uring_sqe **sqe)
{
	if (loop->destroying)
		return -ECANCELED;
	if (!cb) {
		FLOG_ERROR(LOOP_LOG, "request without a callback");
		return -EINVAL;
	}
	if (req->loop) {
		FLOG_ERROR(LOOP_LOG, "request %p submitted while still pending", (void *)req);
		return -EBUSY;
	}
	if (fd < 0 && op != FERRY_LOOP_OP_RAW) {
		FLOG_ERROR(LOOP_LOG, "request on fd %d", fd);
		return -EBADF;
	}
	*sqe = ferry__loop_sqe(loop, nsqe);
	if (!*sqe) {
		FLOG_WARN(LOOP_LOG, "submission queue full");
		return -EAGAIN;
	}
	req->cb = cb;
	req->sent_cb = NULL;
	req->loop = loop;
	req->buf = NULL;
	req->delay = NULL;
	req->fd = fd;
	req->result = 0;
	req->arg = 0;
	req->op = (uint8_t)op;
	req->flags = 0;
	req->cqes = 0;
	return 0;
}

static void commit(struct ferry__loop *loop, struct ferry__loop_req *req, struct io_uring_sqe *sqe,
		   uint64_t tag)
{
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)req | tag);
	req->cqes++;
	loop->inflight++;
}

static int check_len(size_t len)
{
	if (len > UINT_MAX) {
		FLOG_ERROR(LOOP_LOG, "buffer of %zu bytes is larger than one io_uring request",
			   len);
		return -EINVAL;
	}
	return 0;
}

static void prep_accept(struct ferry__loop_req *req, struct io_uring_sqe *sqe)
{
	io_uring_prep_multishot_accept(sqe, req->fd, NULL, NULL, SOCK_CLOEXEC);
}

static void prep_poll(struct ferry__loop_req *req, struct io_uring_sqe *sqe)
{
	if (req->flags & REQ_MULTISHOT)
		io_uring_prep_poll_multishot(sqe, req->fd, req->arg);
	else
		io_uring_prep_poll_add(sqe, req->fd, req->arg);
}

int ferry__loop_rearm(struct ferry__loop *loop, struct ferry__loop_req *req)
{
	struct io_uring_sqe *sqe = ferry__loop_sqe(loop, 1);

	if (!sqe)
		return -EAGAIN;
	if (req->op == FERRY_LOOP_OP_ACCEPT)
		prep_accept(req, sqe);
	else
		prep_poll(req, sqe);
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_accept(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
		       ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_ACCEPT, fd, cb, 1, &sqe);

	if (ret < 0)
		return ret;
	req->flags = REQ_MULTISHOT;
	prep_accept(req, sqe);
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_connect(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			const struct sockaddr *addr, socklen_t addrlen, unsigned timeout_ms,
			ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe, *timeout_sqe = NULL;
	int ret = start(loop, req, FERRY_LOOP_OP_CONNECT, fd, cb, timeout_ms ? 2 : 1, &sqe);

	if (ret < 0)
		return ret;
	/* Both SQEs were reserved together, so the link cannot be split by a flush. */
	if (timeout_ms)
		timeout_sqe = io_uring_get_sqe(&loop->ring);
	io_uring_prep_connect(sqe, fd, addr, addrlen);
	commit(loop, req, sqe, TAG_MAIN);
	if (!timeout_sqe)
		return 0;
	sqe->flags |= IOSQE_IO_LINK;
	req->timeout.tv_sec = timeout_ms / 1000;
	req->timeout.tv_nsec = (long long)(timeout_ms % 1000) * 1000000;
	io_uring_prep_link_timeout(timeout_sqe, &req->timeout, 0);
	commit(loop, req, timeout_sqe, TAG_LINK_TIMEOUT);
	return 0;
}

int ferry__loop_recv(struct ferry__loop *loop, struct ferry__loop_req *req, int fd, void *buf,
		     size_t len, int flags, ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = check_len(len);

	if (ret == 0)
		ret = start(loop, req, FERRY_LOOP_OP_RECV, fd, cb, 1, &sqe);
	if (ret < 0)
		return ret;
	io_uring_prep_recv(sqe, fd, buf, len, flags);
	req->buf = buf;
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_send(struct ferry__loop *loop, struct ferry__loop_req *req, int fd, const void *buf,
		     size_t len, int flags, ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = check_len(len);

	if (ret == 0)
		ret = start(loop, req, FERRY_LOOP_OP_SEND, fd, cb, 1, &sqe);
	if (ret < 0)
		return ret;
	io_uring_prep_send(sqe, fd, buf, len, flags);
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_recvmsg(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			struct msghdr *msg, int flags, ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_RECVMSG, fd, cb, 1, &sqe);

	if (ret < 0)
		return ret;
	io_uring_prep_recvmsg(sqe, fd, msg, (unsigned)flags);
	req->buf = msg;
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_sendmsg(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			const struct msghdr *msg, int flags, ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_SENDMSG, fd, cb, 1, &sqe);

	if (ret < 0)
		return ret;
	io_uring_prep_sendmsg(sqe, fd, msg, (unsigned)flags);
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_send_zc(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			const void *buf, size_t len, int flags, ferry__loop_cb sent_cb,
			ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = check_len(len);

	if (ret == 0)
		ret = start(loop, req, FERRY_LOOP_OP_SEND_ZC, fd, cb, 1, &sqe);
	if (ret < 0)
		return ret;
	io_uring_prep_send_zc(sqe, fd, buf, len, flags, 0);
	req->sent_cb = sent_cb;
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_sendmsg_zc(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
			   const struct msghdr *msg, int flags, ferry__loop_cb sent_cb,
			   ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_SEND_ZC, fd, cb, 1, &sqe);

	if (ret < 0)
		return ret;
	io_uring_prep_sendmsg_zc(sqe, fd, msg, (unsigned)flags);
	req->sent_cb = sent_cb;
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_poll(struct ferry__loop *loop, struct ferry__loop_req *req, int fd, unsigned events,
		     bool multishot, ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_POLL, fd, cb, 1, &sqe);

	if (ret < 0)
		return ret;
	req->arg = events;
	if (multishot)
		req->flags = REQ_MULTISHOT;
	prep_poll(req, sqe);
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

int ferry__loop_close(struct ferry__loop *loop, struct ferry__loop_req *req, int fd,
		      ferry__loop_cb cb)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_CLOSE, fd, cb, 1, &sqe);

	if (ret < 0)
		return ret;
	announce_close(fd);
	io_uring_prep_close(sqe, fd);
	commit(loop, req, sqe, TAG_MAIN);
	return 0;
}

struct io_uring_sqe *ferry__loop_raw(struct ferry__loop *loop, struct ferry__loop_req *req,
				     ferry__loop_cb cb, int *err)
{
	struct io_uring_sqe *sqe;
	int ret = start(loop, req, FERRY_LOOP_OP_RAW, -1, cb, 1, &sqe);

	if (ret < 0) {
		*err = ret;
		return NULL;
	}
	/* user_data survives the caller's io_uring_prep_*(): none of them writes it. */
	commit(loop, req, sqe, TAG_MAIN);
	return sqe;
}

/* A ferry__loop_call() in flight: its result comes back under lock. */
struct loop_call {
	int (*fn)(void *arg);
	void *arg;
	int ret;
	bool done;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static void loop_call_run(void *arg, int status)
{
	struct loop_call *c = arg;
	int ret = status < 0 ? status : c->fn(c->arg);

	pthread_mutex_lock(&c->lock);
	c->ret = ret;
	c->done = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

int ferry__loop_call(struct ferry__loop *loop, int (*fn)(void *arg), void *arg)
{
	struct loop_call c = {.fn = fn, .arg = arg};
	int ret;

	pthread_mutex_init(&c.lock, NULL);
	pthread_cond_init(&c.cond, NULL);
	ret = ferry__loop_post(loop, loop_call_run, &c);
	pthread_mutex_lock(&c.lock);
	while (ret == 0 && !c.done)
		pthread_cond_wait(&c.cond, &c.lock);
	pthread_mutex_unlock(&c.lock);
	pthread_cond_destroy(&c.cond);
	pthread_mutex_destroy(&c.lock);
	return ret < 0 ? ret : c.ret;
}
