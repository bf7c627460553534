/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The borrower's side of the owner's socket (owner_srv.c, schema/runtime.fbs): a get of an
 * object another process owns that is not in the store (it lives in its owner's memory store,
 * or is still pending) asks the owner; a ref of another owner kept with ferry_ref_dup takes a
 * count at the owner (BorrowUpdate), given back by ferry_ref_drop.
 *
 * DESIGN
 * - Blocking calls on the API's threads, never on the runtime's loop: a get opens its own
 *   connection (it may wait long for a pending object) and closes it; counts go over one
 *   connection per owner, kept open until shutdown (the owner drops the counts of a closed
 *   one: a borrower that dies frees what it borrowed), used under borrow_lock.
 * - An owner's socket that refuses connections (ECONNREFUSED: its process is gone, the file
 *   left behind) or closes mid-request is an owner that died: -EOWNERDEAD, naming it.
 * - A ferry_wait on other owners' objects asks each owner once per object, on one connection
 *   per owner, and polls those connections: the owner answers each get when its object is
 *   ready (no repeated probing).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/fb.h"
#include "common/frame.h"
#include "common/hashmap.h"
#include "common/loop.h"
#include "common/wire.h"
#include "runtime/owner.h"
#include "runtime/rt.h"

#define FRAME_MAX (64u << 20)	/* runtime.fbs: the receiver's frame cap */
#define UPDATE_TIMEOUT_MS 10000 /* a count's round trip; an owner this slow is taken as dead */

/* A connection to one owner, for counts. */
struct owner_line {
	struct owner_line *next;      /* all of them */
	struct ferry_worker_id owner; /* whose */
	int fd;			      /* -1 once broken */
	struct ferry__hashmap held;   /* object id -> int64_t: counts held there */
};

static pthread_mutex_t borrow_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner_line *lines; /* under borrow_lock */
static _Atomic uint64_t next_request;

/* ---- frames on a blocking socket ---- */

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_frame(int fd, uint16_t type, const struct ferry__fb_builder *fb)
{
	uint8_t hdr[FERRY_FRAME_HEADER_SIZE];
	size_t len = ferry__fb_builder_size(fb);
	int ret;

	ferry__frame_header_encode(hdr, type, (uint32_t)len);
	ret = write_all(fd, hdr, sizeof(hdr));
	return ret < 0 ? ret : write_all(fd, ferry__fb_builder_data(fb), len);
}

/* Read @len bytes by @deadline_ms (< 0: none). -ETIMEDOUT, -ECONNRESET at EOF, -errno. */
static int read_all(int fd, void *buf, size_t len, int64_t deadline_ms)
{
	uint8_t *p = buf;

	while (len) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int64_t now = (int64_t)ferry__loop_now_ms();
		int wait = deadline_ms < 0 ? -1 : deadline_ms > now ? (int)(deadline_ms - now) : 0;
		ssize_t n;
		int r = poll(&pfd, 1, wait);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		n = recv(fd, p, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One frame of @want (others are skipped), verified, into *@payload (ferry__malloc'd). */
static int recv_frame(int fd, uint16_t want, int64_t deadline_ms, void **payload, size_t *len)
{
	for (;;) {
		uint8_t hdr[FERRY_FRAME_HEADER_SIZE];
		struct ferry__frame_header h;
		void *buf;
		int ret = read_all(fd, hdr, sizeof(hdr), deadline_ms);

		if (ret < 0)
			return ret;
		if (ferry__frame_header_decode(hdr, FRAME_MAX, &h) < 0)
			return -EPROTO;
		buf = ferry__malloc(h.length ? h.length : 1);
		if (!buf)
			return -ENOMEM;
		ret = read_all(fd, buf, h.length, deadline_ms);
		if (ret == 0 && h.type == want && ferry__wire_verify(want, buf, h.length) < 0)
			ret = -EPROTO;
		if (ret == 0 && h.type == want) {
			*payload = buf;
			*len = h.length;
			return 0;
		}
		ferry__free(buf);
		if (ret < 0)
			return ret;
	}
}

/* Connect to @owner's socket and say who we are. The fd, or -EOWNERDEAD (refused: it died),
 * -ENOENT (no socket: not on this host, or it ended), -errno. */
static int dial(const struct ferry_worker_id *owner)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct ferry__wire_runtime_connect m = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION};
	struct ferry__fb_builder fb;
	int fd, ret;

	if (ferry__rt_owner_path(ferry__rt.store_socket, owner, sa.sun_path, sizeof(sa.sun_path)) <
	    0)
		return -ENAMETOOLONG;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = errno == ECONNREFUSED ? -EOWNERDEAD : -errno;
		close(fd);
		return ret;
	}
	m.kind = ferry__rt.worker ? FERRY__WIRE_PEER_KIND_WORKER : FERRY__WIRE_PEER_KIND_DRIVER;
	memcpy(m.id.bytes, ferry__rt.self.bytes, sizeof(m.id.bytes));
	m.pid = (int32_t)getpid();
	ferry__fb_builder_init(&fb);
	ret = ferry__wire_runtime_connect_build(&fb, &m);
	if (ret >= 0)
		ret = send_frame(fd, FERRY__WIRE_MSG_RUNTIME_CONNECT, &fb);
	ferry__fb_builder_fini(&fb);
	if (ret < 0) {
		close(fd);
		return ret == -EPIPE || ret == -ECONNRESET ? -EOWNERDEAD : ret;
	}
	return fd;
}

static void say_dead(const struct ferry_worker_id *owner, const char *when, char *out, size_t size)
{
	char hex[FERRY_ID_HEX_MAX];

	ferry_worker_id_to_hex(owner, hex, sizeof(hex));
	snprintf(out, size, "the owner of the object (%s) died%s", hex, when);
}

/* ---- gets ---- */

static int read_get_reply(const void *payload, struct ferry_view *out)
{
	struct ferry__wire_object_get_reply_view v =
		ferry__wire_object_get_reply_root_verified(payload);
	int status = ferry__wire_object_get_reply_status(v);
	const char *m = ferry__wire_object_get_reply_message(v);
	size_t len = ferry__wire_object_get_reply_data_count(v);
	void *copy;

	if (status < 0) {
		snprintf(out->error, sizeof(out->error), "%.*s",
			 m ? (int)ferry__wire_object_get_reply_message_len(v) : 0, m ? m : "");
		return status < -4095 ? -EPROTO : status;
	}
	if (ferry__wire_object_get_reply_in_store(v))
		return 1;
	copy = ferry__malloc(len ? len : 1);
	if (!copy)
		return -ENOMEM;
	if (len)
		memcpy(copy, ferry__wire_object_get_reply_data_data(v), len);
	out->data = copy;
	out->len = len;
	out->priv[0] = (uint64_t)(uintptr_t)copy;
	out->priv[1] = FERRY__RT_VIEW_COPY;
	return 0;
}

int ferry__rt_borrow_get(const struct ferry_ref *ref, int64_t deadline_ms, struct ferry_view *out)
{
	struct ferry__wire_object_get m = {.request_id = ++next_request, .object_id = ref->id};
	struct ferry__fb_builder fb;
	void *payload = NULL;
	size_t len;
	int fd = dial(&ref->owner), ret;

	if (fd < 0) {
		if (fd == -EOWNERDEAD)
			say_dead(&ref->owner, ": its socket refuses connections", out->error,
				 sizeof(out->error));
		return fd;
	}
	ferry__fb_builder_init(&fb);
	ret = ferry__wire_object_get_build(&fb, &m);
	if (ret >= 0)
		ret = send_frame(fd, FERRY__WIRE_MSG_OBJECT_GET, &fb);
	ferry__fb_builder_fini(&fb);
	if (ret >= 0)
		ret = recv_frame(fd, FERRY__WIRE_MSG_OBJECT_GET_REPLY, deadline_ms, &payload, &len);
	close(fd);
	if (ret == -ECONNRESET || ret == -EPIPE) {
		say_dead(&ref->owner, " while a get waited for it", out->error, sizeof(out->error));
		return -EOWNERDEAD;
	}
	if (ret < 0)
		return ret;
	ret = read_get_reply(payload, out);
	ferry__free(payload);
	return ret;
}

/* ---- a wait's watch ---- */

/* One connection per owner on this host, every unanswered ref of that owner asked on it once
 * (the request id is the ref's index): the owner answers each when its object is ready. */
struct watch_line {
	struct ferry_worker_id owner;
	int fd;		/* -1 once answered for all, or broken */
	size_t pending; /* refs asked, not answered */
};

struct ferry__rt_borrow_watch {
	const struct ferry_ref *refs;
	size_t n;
	uint8_t *answered;	  /* [n]: a get would return now */
	struct watch_line *lines; /* [nlines] */
	struct pollfd *pfds;	  /* [nlines] */
	size_t nlines;
};

static struct watch_line *watch_line_of(struct ferry__rt_borrow_watch *w,
					const struct ferry_worker_id *owner)
{
	for (size_t i = 0; i < w->nlines; i++)
		if (ferry_worker_id_eq(&w->lines[i].owner, owner))
			return &w->lines[i];
	return NULL;
}

/* Every ref of @l's owner is answered: the owner died (a get says so at once). */
static void watch_line_dead(struct ferry__rt_borrow_watch *w, struct watch_line *l)
{
	for (size_t i = 0; i < w->n; i++)
		if (ferry_worker_id_eq(&w->refs[i].owner, &l->owner))
			w->answered[i] = 1;
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
}

static int send_get(int fd, uint64_t request_id, const struct ferry_object_id *id)
{
	struct ferry__wire_object_get m = {.request_id = request_id, .object_id = *id};
	struct ferry__fb_builder fb;
	int ret;

	ferry__fb_builder_init(&fb);
	ret = ferry__wire_object_get_build(&fb, &m);
	if (ret >= 0)
		ret = send_frame(fd, FERRY__WIRE_MSG_OBJECT_GET, &fb);
	ferry__fb_builder_fini(&fb);
	return ret < 0 ? ret : 0;
}

struct ferry__rt_borrow_watch *ferry__rt_borrow_watch_start(const struct ferry_ref *refs, size_t n,
							    const int *ready)
{
	struct ferry__rt_borrow_watch *w = ferry__calloc(1, sizeof(*w));

	if (!w || !(w->answered = ferry__calloc(n ? n : 1, 1)) ||
	    !(w->lines = ferry__calloc(n ? n : 1, sizeof(*w->lines))) ||
	    !(w->pfds = ferry__calloc(n ? n : 1, sizeof(*w->pfds)))) {
		ferry__rt_borrow_watch_end(w);
		return NULL; /* the caller looks at the store only */
	}
	w->refs = refs;
	w->n = n;
	for (size_t i = 0; i < n; i++) {
		struct watch_line *l;

		if (ready[i] || ferry__rt_is_self(&refs[i].owner))
			continue;
		l = watch_line_of(w, &refs[i].owner);
		if (!l) {
			int fd = dial(&refs[i].owner);

			if (fd == -ENOENT)
				continue; /* no socket here: an owner elsewhere, seen in the store */
			l = &w->lines[w->nlines++];
			l->owner = refs[i].owner;
			l->fd = fd < 0 ? -1 : fd;
			if (fd < 0) {
				watch_line_dead(w, l);
				continue;
			}
		}
		if (l->fd >= 0 && send_get(l->fd, i, &refs[i].id) < 0)
			watch_line_dead(w, l);
		else if (l->fd >= 0)
			l->pending++;
	}
	return w;
}

/* One answer on @l, read by @deadline_ms (the wait's; < 0: none): its ref is answered
 * (whatever the status: a get returns it now). */
static void watch_read(struct ferry__rt_borrow_watch *w, struct watch_line *l, int64_t deadline_ms)
{
	void *payload = NULL;
	size_t len;
	uint64_t rid;
	int ret = recv_frame(l->fd, FERRY__WIRE_MSG_OBJECT_GET_REPLY,
			     deadline_ms >= 0 ? deadline_ms
					      : (int64_t)ferry__loop_now_ms() + UPDATE_TIMEOUT_MS,
			     &payload, &len);

	if (ret == -ETIMEDOUT && deadline_ms >= 0) {
		/* The wait's time ran out mid-reply: not an answer, and the line is out of step. */
		close(l->fd);
		l->fd = -1;
		return;
	}
	if (ret < 0) {
		watch_line_dead(w, l); /* closed mid-wait, or silent mid-reply: it died */
		return;
	}
	rid = ferry__wire_object_get_reply_request_id(
		ferry__wire_object_get_reply_root_verified(payload));
	ferry__free(payload);
	if (rid < w->n && !w->answered[rid] && ferry_worker_id_eq(&w->refs[rid].owner, &l->owner)) {
		w->answered[rid] = 1;
		if (--l->pending == 0) { /* nothing more to hear on it */
			close(l->fd);
			l->fd = -1;
		}
	}
}

size_t ferry__rt_borrow_watch_poll(struct ferry__rt_borrow_watch *w, int timeout_ms,
				   int64_t deadline_ms)
{
	size_t np = 0, got = 0;
	int r;

	for (size_t i = 0; i < w->nlines; i++)
		if (w->lines[i].fd >= 0)
			w->pfds[np++] = (struct pollfd){.fd = w->lines[i].fd, .events = POLLIN};
	if (!np)
		return 0;
	r = poll(w->pfds, np, timeout_ms);
	for (size_t k = 0; r > 0 && k < np; k++) {
		struct watch_line *l = NULL;

		if (!w->pfds[k].revents)
			continue;
		for (size_t i = 0; i < w->nlines && !l; i++)
			if (w->lines[i].fd == w->pfds[k].fd)
				l = &w->lines[i];
		if (l) {
			watch_read(w, l, deadline_ms);
			got++;
		}
	}
	return got;
}

bool ferry__rt_borrow_watch_answered(const struct ferry__rt_borrow_watch *w, size_t i)
{
	return w && i < w->n && w->answered[i];
}

void ferry__rt_borrow_watch_end(struct ferry__rt_borrow_watch *w)
{
	if (!w)
		return;
	for (size_t i = 0; w->lines && i < w->nlines; i++)
		if (w->lines[i].fd >= 0)
			close(w->lines[i].fd); /* the owner drops the gets still waiting */
	ferry__free(w->pfds);
	ferry__free(w->lines);
	ferry__free(w->answered);
	ferry__free(w);
}

/* ---- counts ---- */

/* The line to @owner, dialled if new; NULL with *@err. */
static struct owner_line *line_of(const struct ferry_worker_id *owner, int *err)
{
	struct owner_line *l;
	int fd;

	for (l = lines; l; l = l->next)
		if (ferry_worker_id_eq(&l->owner, owner))
			return l;
	fd = dial(owner);
	*err = fd < 0 ? fd : -ENOMEM;
	if (fd < 0)
		return NULL;
	l = ferry__calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return NULL;
	}
	l->owner = *owner;
	l->fd = fd;
	ferry__hashmap_init(&l->held, sizeof(struct ferry_object_id), sizeof(int64_t));
	l->next = lines;
	lines = l;
	return l;
}

static int update(struct owner_line *l, const struct ferry_object_id *id, int delta)
{
	struct ferry__wire_borrow_update m = {
		.request_id = ++next_request, .object_id = *id, .delta = delta};
	int64_t deadline = (int64_t)ferry__loop_now_ms() + UPDATE_TIMEOUT_MS;
	struct ferry__fb_builder fb;
	void *payload = NULL;
	size_t len;
	int ret;

	if (l->fd < 0)
		return -EOWNERDEAD;
	ferry__fb_builder_init(&fb);
	ret = ferry__wire_borrow_update_build(&fb, &m);
	if (ret >= 0)
		ret = send_frame(l->fd, FERRY__WIRE_MSG_BORROW_UPDATE, &fb);
	ferry__fb_builder_fini(&fb);
	if (ret >= 0)
		ret = recv_frame(l->fd, FERRY__WIRE_MSG_BORROW_UPDATE_REPLY, deadline, &payload,
				 &len);
	if (ret < 0) {
		close(l->fd);
		l->fd = -1;
		return -EOWNERDEAD;
	}
	ret = ferry__wire_borrow_update_reply_status(
		ferry__wire_borrow_update_reply_root_verified(payload));
	ferry__free(payload);
	return ret;
}

int ferry__rt_borrow_update(const struct ferry_ref *ref, int delta)
{
	struct owner_line *l;
	int64_t *held = NULL;
	void *slot;
	int ret;

	pthread_mutex_lock(&borrow_lock);
	for (l = lines; l && !ferry_worker_id_eq(&l->owner, &ref->owner); l = l->next)
		;
	if (l)
		held = ferry__hashmap_get(&l->held, &ref->id);
	if (delta < 0 && (!held || *held <= 0)) {
		pthread_mutex_unlock(&borrow_lock);
		return 0; /* a ref this process never took a count on: nothing to give back */
	}
	if (!l)
		l = line_of(&ref->owner, &ret);
	if (!l) {
		pthread_mutex_unlock(&borrow_lock);
		/* No socket on this host: an owner elsewhere, whose count this process cannot
		 * take (the store and the GCS serve its gets). */
		return ret == -ENOENT ? 0 : ret;
	}
	ret = update(l, &ref->id, delta);
	if (ret == 0 && !held && ferry__hashmap_put(&l->held, &ref->id, &slot) > 0) {
		held = slot;
		*held = 0;
	}
	if (ret == 0 && held && (*held += delta) == 0)
		ferry__hashmap_remove(&l->held, &ref->id, NULL);
	pthread_mutex_unlock(&borrow_lock);
	return ret;
}

void ferry__rt_borrow_fini(void)
{
	pthread_mutex_lock(&borrow_lock);
	while (lines) {
		struct owner_line *l = lines;

		lines = l->next;
		if (l->fd >= 0)
			close(l->fd); /* the owner drops what we held */
		ferry__hashmap_fini(&l->held);
		ferry__free(l);
	}
	pthread_mutex_unlock(&borrow_lock);
}
