/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plasma client's socket: connecting (with retries while the store starts), the first
 * exchange that brings the shared-memory fds, and request/reply multiplexing for many threads
 * (the reader hand-off is described in client_int.h).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "plasma/client_int.h"

#define RETRY_MS 10 /* between connection attempts while the store starts */
#define MAX_FDS 8   /* most fds the store passes with one message */

static const char comp[] = "plasma";

/* Recvmsg control buffer, aligned for cmsghdr. */
union cmsg_buf {
	char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)]; /* SCM_RIGHTS */
	struct cmsghdr align;			     /* alignment */
};

static int try_connect(const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd, r;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0)
		return fd;
	r = -errno;
	close(fd);
	return r;
}

int ferry__pc_socket(const char *path, unsigned wait_ms)
{
	uint64_t deadline = ferry__now_ms() + wait_ms;
	int r;

	for (;;) {
		r = try_connect(path);
		if (r >= 0 || (r != -ENOENT && r != -ECONNREFUSED) || ferry__now_ms() >= deadline)
			break;
		/* The store is starting: its socket is not there or not listening yet. */
		nanosleep(&(struct timespec){0, RETRY_MS * 1000000L}, NULL);
	}
	if (r < 0)
		FLOG_DEBUG(comp, "client: cannot connect to %s: %s", path, ferry_strerror(r));
	return r;
}

/* ---- frames out ---- */

int ferry__pc_write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EPIPE ? -ECONNRESET : -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Append @len bytes to the held-back notices (send_lock held). */
static int later_append(struct ferry_plasma_client *c, const uint8_t *p, size_t len)
{
	if (c->later_len + len > c->later_cap) {
		size_t cap =
			FERRY_MAX(FERRY_MAX(2 * c->later_cap, c->later_len + len), (size_t)4096);
		uint8_t *n = ferry__realloc(c->later, cap);

		if (!n)
			return -ENOMEM;
		c->later = n;
		c->later_cap = cap;
	}
	memcpy(c->later + c->later_len, p, len);
	c->later_len += len;
	return 0;
}

/* As much of @p as the socket takes now, without waiting: 0 (all of it), -EAGAIN (*@sent
 * bytes went) or -errno. */
static int write_now(int fd, const uint8_t *p, size_t len, size_t *sent)
{
	*sent = 0;
	while (*sent < len) {
		ssize_t n = send(fd, p + *sent, len - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -EAGAIN;
		if (n < 0)
			return errno == EPIPE ? -ECONNRESET : -errno;
		*sent += (size_t)n;
	}
	return 0;
}

/* Send the held-back notices (send_lock held): all of them, or with @try_only on a client
 * whose notices never wait (later_nonblock), what the socket takes now, the rest kept in order
 * (-EAGAIN: flush again). Dropped on error: the connection is gone, and with it every notice's
 * object (the store aborts a dead client's creates). */
static int later_send(struct ferry_plasma_client *c, bool try_only)
{
	size_t sent = 0;
	int r = 0;

	if (!c->later_len)
		return 0;
	if (try_only && c->later_nonblock) {
		r = write_now(c->fd, c->later, c->later_len, &sent);
		if (r == -EAGAIN) {
			memmove(c->later, c->later + sent, c->later_len - sent);
			c->later_len -= sent;
			return r;
		}
	} else {
		r = ferry__pc_write_all(c->fd, c->later, c->later_len);
	}
	if (r < 0)
		FLOG_WARN(comp, "client: %u seal notices not delivered: %s", c->later_count,
			  ferry_strerror(r));
	c->later_len = 0;
	c->later_count = 0;
	return r;
}

static int send_frame(struct ferry_plasma_client *c, uint16_t type, struct ferry__fb_builder *b)
{
	const uint8_t *frame;
	size_t size;
	int r = ferry__frame_finish(b, type, &frame, &size);

	if (r < 0)
		return r;
	pthread_mutex_lock(&c->send_lock);
	/* Notices held back go first, in the same write: the store sees every frame in order. */
	if (c->later_len && later_append(c, frame, size) == 0) {
		r = later_send(c, false);
	} else {
		if ((r = later_send(c, false)) == 0)
			r = ferry__pc_write_all(c->fd, frame, size);
	}
	pthread_mutex_unlock(&c->send_lock);
	return r;
}

/* Notices held back before one write: a burst of pulled copies wakes the store once per
 * burst, and the write stays one page or two. */
#define LATER_MAX 64

int ferry__pc_send_later(struct ferry_plasma_client *c, uint16_t type, struct ferry__fb_builder *b,
			 int built, bool now)
{
	const uint8_t *frame;
	size_t size;
	int r = built;

	if (r == 0)
		r = ferry__frame_finish(b, type, &frame, &size);
	if (r == 0) {
		pthread_mutex_lock(&c->send_lock);
		if (later_append(c, frame, size) == 0) {
			r = ++c->later_count >= LATER_MAX || now ? later_send(c, true)
								 : c->later_count == 1;
			if (r == -EAGAIN) /* the store reads when our caller is back on its loop */
				r = 1;
		} else if ((r = later_send(c, false)) ==
			   0) { /* no room to hold it: after the others */
			r = ferry__pc_write_all(c->fd, frame, size);
		}
		pthread_mutex_unlock(&c->send_lock);
	}
	ferry__fb_builder_fini(b);
	return r;
}

int ferry__pc_flush(struct ferry_plasma_client *c, bool try_only)
{
	int r;

	pthread_mutex_lock(&c->send_lock);
	r = later_send(c, try_only);
	pthread_mutex_unlock(&c->send_lock);
	return r;
}

/* ---- frames in ---- */

static void close_fds(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

/* One recvmsg into the parser. fds that came with it are appended to @fds (up to @max; extra
 * ones are closed). Returns 0, -ECONNRESET at EOF, or -errno. */
static int read_some(struct ferry_plasma_client *c, int *fds, unsigned *nfds, unsigned max)
{
	union cmsg_buf cbuf;
	struct iovec iov;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	struct cmsghdr *cm;
	ssize_t n;
	int r = ferry__frame_parser_space(&c->parser, (uint8_t **)&iov.iov_base, &iov.iov_len);

	if (r < 0)
		return r;
	do {
		msg.msg_control = cbuf.buf;
		msg.msg_controllen = sizeof(cbuf.buf);
		n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		int *in = (int *)(void *)CMSG_DATA(cm);
		unsigned k = (unsigned)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (unsigned i = 0; i < k; i++) {
			if (nfds && *nfds < max)
				fds[(*nfds)++] = in[i];
			else
				close(in[i]);
		}
	}
	ferry__frame_parser_commit(&c->parser, (size_t)n);
	return 0;
}

/* The seq a reply echoes, or 0 for a type the client never asks for. */
static uint64_t reply_seq(uint16_t type, const void *payload)
{
	switch (type) {
	case FERRY__WIRE_MSG_PLASMA_STATUS_REPLY:
		return ferry__wire_plasma_status_reply_seq(
			ferry__wire_plasma_status_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_CREATE_REPLY:
		return ferry__wire_plasma_create_reply_seq(
			ferry__wire_plasma_create_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_DELETE_REPLY:
		return ferry__wire_plasma_delete_reply_seq(
			ferry__wire_plasma_delete_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_CONTAINS_REPLY:
		return ferry__wire_plasma_contains_reply_seq(
			ferry__wire_plasma_contains_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_GET_REPLY:
		return ferry__wire_plasma_get_reply_seq(
			ferry__wire_plasma_get_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_WAIT_REPLY:
		return ferry__wire_plasma_wait_reply_seq(
			ferry__wire_plasma_wait_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_EVICT_REPLY:
		return ferry__wire_plasma_evict_reply_seq(
			ferry__wire_plasma_evict_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_LIST_REPLY:
		return ferry__wire_plasma_list_reply_seq(
			ferry__wire_plasma_list_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_STATS_REPLY:
		return ferry__wire_plasma_stats_reply_seq(
			ferry__wire_plasma_stats_reply_root_verified(payload));
	case FERRY__WIRE_MSG_PLASMA_CONNECT_REPLY:
		return ferry__wire_plasma_connect_reply_seq(
			ferry__wire_plasma_connect_reply_root_verified(payload));
	default:
		return 0;
	}
}

/* Hand a verified reply to its waiter. io_lock held. */
static void deliver(struct ferry_plasma_client *c, const struct ferry__frame *f)
{
	uint64_t seq = reply_seq(f->type, f->payload);
	struct ferry__pc_pending *p;

	for (p = c->pending; p && p->seq != seq; p = p->next)
		;
	if (!p || !seq || p->done) {
		FLOG_DEBUG(comp, "client: dropping %s (seq %llu): nobody waits for it",
			   ferry__wire_message_name(f->type), (unsigned long long)seq);
		return;
	}
	p->done = true;
	if (f->type != p->reply_type) {
		FLOG_ERROR(comp, "client: the store answered with %s, expected %s",
			   ferry__wire_message_name(f->type),
			   ferry__wire_message_name(p->reply_type));
		p->status = -EPROTO;
		return;
	}
	p->buf = ferry__malloc(FERRY_MAX(f->length, 1u));
	if (!p->buf) {
		p->status = -ENOMEM;
		return;
	}
	memcpy(p->buf, f->payload, f->length);
	p->len = f->length;
	p->status = 0;
}

/* Read once and deliver every complete frame. Called without locks. Returns 0 or -errno (the
 * connection is unusable). */
static int pump(struct ferry_plasma_client *c)
{
	struct ferry__frame f;
	int r = read_some(c, NULL, NULL, 0);

	while (r == 0 && (r = ferry__frame_parser_next(&c->parser, &f)) == 1) {
		r = ferry__wire_verify(f.type, f.payload, f.length);
		if (r < 0) {
			FLOG_ERROR(comp, "client: malformed %s from the store",
				   ferry__wire_message_name(f.type));
			break;
		}
		pthread_mutex_lock(&c->io_lock);
		deliver(c, &f);
		pthread_cond_broadcast(&c->io_cond);
		pthread_mutex_unlock(&c->io_lock);
	}
	return r < 0 ? r : 0;
}

/* ---- requests ---- */

uint64_t ferry__pc_begin(struct ferry_plasma_client *c, struct ferry__pc_pending *p,
			 uint16_t reply_type)
{
	*p = (struct ferry__pc_pending){.reply_type = reply_type};
	pthread_mutex_lock(&c->io_lock);
	if (c->io_error) {
		p->status = c->io_error;
		p->done = true;
	} else {
		p->seq = ++c->next_seq;
		p->next = c->pending;
		c->pending = p;
	}
	pthread_mutex_unlock(&c->io_lock);
	return p->seq;
}

/* io_lock held. */
static void unregister(struct ferry_plasma_client *c, struct ferry__pc_pending *p)
{
	struct ferry__pc_pending **pp;

	for (pp = &c->pending; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

/* Wait for @p's reply, reading the socket when nobody else is. */
static int wait_reply(struct ferry_plasma_client *c, struct ferry__pc_pending *p)
{
	pthread_mutex_lock(&c->io_lock);
	while (!p->done && !c->io_error) {
		int r;

		if (c->reading) {
			pthread_cond_wait(&c->io_cond, &c->io_lock);
			continue;
		}
		c->reading = true;
		pthread_mutex_unlock(&c->io_lock);
		r = pump(c);
		pthread_mutex_lock(&c->io_lock);
		c->reading = false;
		if (r < 0 && !c->io_error)
			c->io_error = r == -EPROTO ? -EPROTO : r;
		/* Our reply or not: someone else may need to read now. */
		pthread_cond_broadcast(&c->io_cond);
	}
	unregister(c, p);
	if (!p->done) {
		p->done = true;
		p->status = c->io_error;
	}
	pthread_mutex_unlock(&c->io_lock);
	return p->status;
}

int ferry__pc_finish(struct ferry_plasma_client *c, struct ferry__pc_pending *p, uint16_t type,
		     struct ferry__fb_builder *b, int built)
{
	int r = built;

	if (p && p->done)
		r = p->status; /* begin failed: the connection is gone */
	if (r == 0)
		r = send_frame(c, type, b);
	ferry__fb_builder_fini(b);
	if (r < 0) {
		if (p) {
			pthread_mutex_lock(&c->io_lock);
			unregister(c, p);
			pthread_mutex_unlock(&c->io_lock);
		}
		return r;
	}
	return p ? wait_reply(c, p) : 0;
}

/* ---- the first exchange ---- */

int ferry__pc_hello(struct ferry_plasma_client *c, const char *name, uint64_t chunk_bytes,
		    uint8_t **reply, size_t *len, int *fds, unsigned *nfds)
{
	/* pid: the store asks the kernel who we are; stores of earlier versions believed it. */
	struct ferry__wire_plasma_connect m = {
		.seq = 1, .pid = (int32_t)getpid(), .name = name, .want_chunk_size = chunk_bytes};
	struct ferry__fb_builder b = {0};
	struct ferry__frame f;
	int r;

	*nfds = 0;
	c->next_seq = 1;
	r = ferry__pc_finish(c, NULL, FERRY__WIRE_MSG_PLASMA_CONNECT, &b,
			     ferry__wire_plasma_connect_build(&b, &m));
	while (r == 0 && (r = ferry__frame_parser_next(&c->parser, &f)) == 0)
		r = read_some(c, fds, nfds, 2);
	if (r < 0)
		goto err_close_fds;
	r = -EPROTO;
	if (f.type != FERRY__WIRE_MSG_PLASMA_CONNECT_REPLY ||
	    ferry__wire_verify(f.type, f.payload, f.length) < 0) {
		FLOG_ERROR(comp, "client: the peer is not a plasma store (it sent %s)",
			   ferry__wire_message_name(f.type));
		goto err_close_fds;
	}
	r = -ENOMEM;
	*reply = ferry__malloc(f.length);
	if (!*reply)
		goto err_close_fds;
	memcpy(*reply, f.payload, f.length);
	*len = f.length;
	return 0;

err_close_fds:
	close_fds(fds, *nfds);
	*nfds = 0;
	return r;
}

void ferry__pc_io_fini(struct ferry_plasma_client *c)
{
	ferry__frame_parser_fini(&c->parser);
	ferry__free(c->later);
	c->later = NULL;
}
