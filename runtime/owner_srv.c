/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The owner's socket (schema/runtime.fbs): every owner (a driver, or a worker whose tasks
 * submit) serves "o-<its id hex>.sock" in its node's directory, so that a process holding one
 * of its refs (a borrower) can get an object that lives only in this owner's memory store,
 * wait for one still pending, and hold counts on it (BorrowUpdate) that keep it alive until
 * the borrower gives them back or its connection closes (it died).
 *
 * DESIGN
 * - All on the runtime's loop thread (ferry__loop), beside lease.c's sockets. The owner table
 *   is read and changed under ferry__rt.lock as everywhere (rt.h).
 * - A get of a pending object waits in `waits` (one per request). ferry__rt_obj_ready (any
 *   thread, lock held) calls ferry__rt_owner_srv_ready, which kicks one scan of the waits on
 *   the loop (a post-queue with no items, common/postq.h); a borrower's close drops its waits
 *   and its counts.
 * - Bad input (a first frame that is not RuntimeConnect, a message no borrower sends) closes
 *   that connection with a log line; a request that names no object of ours is answered
 *   -ENOENT.
 */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/conn.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/loop.h"
#include "common/postq.h"
#include "common/wire.h"
#include "runtime/owner.h"
#include "runtime/rt.h"
#include "runtime/worker.h"

#define COMP "runtime"

struct borrower {
	struct ferry__conn *conn;     /* its connection, NULL once closed */
	bool greeted;		      /* its RuntimeConnect came */
	struct ferry__hashmap counts; /* object id -> int64_t: counts it holds here */
};

struct wait {
	struct wait *next;	   /* all waits */
	struct borrower *b;	   /* who asked */
	uint64_t request_id;	   /* echoed */
	struct ferry_object_id id; /* the object */
};

static struct {
	struct ferry__conn_server *server;	   /* listening, or NULL */
	char path[sizeof(ferry__rt.store_socket)]; /* its socket file */
	struct wait *waits;			   /* gets of pending objects */
	struct ferry__postq scan;		   /* kicked: look at the waits again */
	struct ferry__fb_builder fb;		   /* replies */
	bool fb_ready;				   /* fb initialised */
} osrv;

int ferry__rt_owner_path(const char *store_socket, const struct ferry_worker_id *owner, char *out,
			 size_t size)
{
	char dir[sizeof(ferry__rt.store_socket)], hex[FERRY_ID_HEX_MAX];
	int n;

	snprintf(dir, sizeof(dir), "%s", store_socket);
	ferry_worker_id_to_hex(owner, hex, sizeof(hex));
	n = snprintf(out, size, "%s/o-%s.sock", dirname(dir), hex);
	if (n < 0 || (size_t)n >= size || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	return 0;
}

int ferry__rt_owner_decode(uint16_t type, const void *payload, size_t len,
			   struct ferry__rt_owner_msg *out)
{
	memset(out, 0, sizeof(*out));
	if (!payload || ferry__wire_verify(type, payload, len) < 0)
		return -EPROTO;
	out->type = type;
	switch (type) {
	case FERRY__WIRE_MSG_OBJECT_GET: {
		struct ferry__wire_object_get_view v =
			ferry__wire_object_get_root_verified(payload);

		out->request_id = ferry__wire_object_get_request_id(v);
		out->id = ferry__wire_object_get_object_id(v);
		break;
	}
	case FERRY__WIRE_MSG_BORROW_UPDATE: {
		struct ferry__wire_borrow_update_view v =
			ferry__wire_borrow_update_root_verified(payload);

		out->request_id = ferry__wire_borrow_update_request_id(v);
		out->id = ferry__wire_borrow_update_object_id(v);
		out->delta = ferry__wire_borrow_update_delta(v);
		if (out->delta != 1 && out->delta != -1)
			return -EINVAL;
		break;
	}
	default:
		return -EPROTO;
	}
	return ferry_id_is_nil(out->id.bytes, sizeof(out->id.bytes)) ? -EINVAL : 0;
}

/* ---- replies ---- */

/* Lock held: the answer to a get of @o (NULL: no count left on it). */
static void send_get_reply(struct borrower *b, uint64_t request_id, const struct ferry__rt_obj *o)
{
	struct ferry__wire_object_get_reply m = {.request_id = request_id};

	if (!b->conn || !osrv.fb_ready) /* closed, or the owner stopped serving */
		return;
	if (!o) {
		m.status = -ENOENT;
		m.message = "the owner holds no count on it any more (every ref was dropped)";
	} else if (o->state == FERRY__RT_ERROR) {
		m.status = o->status < 0 ? o->status : -EIO;
		m.message = o->error;
	} else if (o->state == FERRY__RT_IN_STORE) {
		m.in_store = true;
	} else {
		m.data = o->data ? o->data : (const uint8_t *)"";
		m.data_count = o->len;
	}
	if (ferry__wire_object_get_reply_build(&osrv.fb, &m) >= 0)
		(void)ferry__conn_send(b->conn, FERRY__WIRE_MSG_OBJECT_GET_REPLY,
				       ferry__fb_builder_data(&osrv.fb),
				       ferry__fb_builder_size(&osrv.fb));
}

static void on_get(struct borrower *b, const struct ferry__rt_owner_msg *m)
{
	struct ferry__rt_obj *o;
	struct wait *w;

	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_find(&m->id);
	if (o && o->state == FERRY__RT_PENDING) {
		w = ferry__calloc(1, sizeof(*w));
		if (w) {
			*w = (struct wait){osrv.waits, b, m->request_id, m->id};
			osrv.waits = w;
		} else {
			ferry__conn_close(b->conn); /* its get fails as the owner's loss: retried */
		}
	} else {
		send_get_reply(b, m->request_id, o);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
}

static void on_borrow(struct borrower *b, const struct ferry__rt_owner_msg *m)
{
	struct ferry__wire_borrow_update_reply r = {.request_id = m->request_id};
	struct ferry__rt_obj *o;
	int64_t *held;
	void *slot;

	pthread_mutex_lock(&ferry__rt.lock);
	o = ferry__rt_obj_find(&m->id);
	held = ferry__hashmap_get(&b->counts, &m->id);
	if (!o || (m->delta < 0 && (!held || *held <= 0))) {
		r.status = -ENOENT;
	} else if (m->delta > 0) {
		if (!held && ferry__hashmap_put(&b->counts, &m->id, &slot) > 0) {
			held = slot;
			*held = 0;
		}
		if (held) {
			(*held)++;
			o->refs++;
		} else {
			r.status = -ENOMEM;
		}
	} else {
		if (--*held == 0)
			ferry__hashmap_remove(&b->counts, &m->id, NULL);
		ferry__rt_obj_unref(o);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	if (osrv.fb_ready && ferry__wire_borrow_update_reply_build(&osrv.fb, &r) >= 0)
		(void)ferry__conn_send(b->conn, FERRY__WIRE_MSG_BORROW_UPDATE_REPLY,
				       ferry__fb_builder_data(&osrv.fb),
				       ferry__fb_builder_size(&osrv.fb));
}

/* ---- connections ---- */

static void on_message(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len)
{
	struct borrower *b = ferry__conn_data(conn);
	struct ferry__rt_owner_msg m;
	char why[160];
	int ret;

	if (!b->greeted) {
		if (type != FERRY__WIRE_MSG_RUNTIME_CONNECT ||
		    ferry__worker_check_connect(payload, len, why, sizeof(why)) < 0) {
			FLOG_WARN(COMP, "owner socket: a borrower's first frame was %s: closing",
				  ferry__wire_message_name(type));
			ferry__conn_close(conn);
			return;
		}
		b->greeted = true;
		ferry__conn_set_frame_max(conn, 0);
		return;
	}
	ret = ferry__rt_owner_decode(type, payload, len, &m);
	if (ret < 0) {
		FLOG_WARN(COMP, "owner socket: a borrower sent a bad %s (%s): closing",
			  ferry__wire_message_name(type), ferry_strerror(ret));
		ferry__conn_close(conn);
	} else if (type == FERRY__WIRE_MSG_OBJECT_GET) {
		on_get(b, &m);
	} else {
		on_borrow(b, &m);
	}
}

/* The borrower is gone: its waits go, and so do the counts it held. */
static void on_close(struct ferry__conn *conn, int err)
{
	struct borrower *b = ferry__conn_data(conn);
	struct wait **pp = &osrv.waits, *w;
	size_t cursor = 0;
	void *key, *value;

	(void)err;
	b->conn = NULL;
	pthread_mutex_lock(&ferry__rt.lock);
	while ((w = *pp)) {
		if (w->b == b) {
			*pp = w->next;
			ferry__free(w);
		} else {
			pp = &w->next;
		}
	}
	while (ferry__hashmap_next(&b->counts, &cursor, &key, &value)) {
		struct ferry__rt_obj *o;

		/* Found again each time: the last count frees it. */
		for (int64_t n = *(int64_t *)value; n > 0 && (o = ferry__rt_obj_find(key)); n--)
			ferry__rt_obj_unref(o);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
	ferry__hashmap_fini(&b->counts);
	ferry__free(b);
}

static const struct ferry__conn_callbacks borrower_cb = {
	.on_message = on_message,
	.on_close = on_close,
};

static void on_early_message(struct ferry__conn *conn, uint16_t type, const void *payload,
			     size_t len)
{
	(void)type;
	(void)payload;
	(void)len;
	ferry__conn_close(conn);
}

static void on_early_close(struct ferry__conn *conn, int err)
{
	(void)conn;
	(void)err;
}

static const struct ferry__conn_callbacks early_cb = {
	.on_message = on_early_message,
	.on_close = on_early_close,
};

static void on_accept(struct ferry__conn_server *server, struct ferry__conn *conn,
		      const void *handshake, size_t len)
{
	struct borrower *b = ferry__calloc(1, sizeof(*b));

	(void)server;
	(void)handshake;
	(void)len;
	if (!b) {
		FLOG_ERROR(COMP, "owner socket: out of memory for a borrower: closing it");
		ferry__conn_close(conn);
		return;
	}
	b->conn = conn;
	ferry__hashmap_init(&b->counts, sizeof(struct ferry_object_id), sizeof(int64_t));
	ferry__conn_set_callbacks(conn, &borrower_cb, b);
	ferry__conn_set_frame_max(conn, FERRY__WORKER_CONNECT_MAX);
}

/* ---- waits ---- */

static void scan(struct ferry__postq *q, void *none, int status)
{
	struct wait **pp = &osrv.waits, *w;

	(void)q;
	(void)none;
	pthread_mutex_lock(&ferry__rt.lock);
	while ((w = *pp)) {
		struct ferry__rt_obj *o = ferry__rt_obj_find(&w->id);

		if (status == 0 && o && o->state == FERRY__RT_PENDING) {
			pp = &w->next;
			continue;
		}
		send_get_reply(w->b, w->request_id, status == 0 ? o : NULL);
		*pp = w->next;
		ferry__free(w);
	}
	pthread_mutex_unlock(&ferry__rt.lock);
}

void ferry__rt_owner_srv_ready(void)
{
	if (osrv.waits && ferry__rt.loop)
		(void)ferry__postq_kick(&osrv.scan); /* refused only once the loop is going */
}

/* ---- life ---- */

int ferry__rt_owner_srv_start(void *arg)
{
	struct ferry__conn_server_opts so = {
		.conn = {.cb = &early_cb, .max_message_bytes = FERRY__WORKER_FRAME_MAX},
		.on_accept = on_accept,
		.server_kind = FERRY__WIRE_PEER_KIND_DRIVER,
		.flags = FERRY_CONN_SERVER_NO_HANDSHAKE,
	};
	int ret;

	(void)arg;
	/* A new loop each ferry_init; the last one's destroy ran its drain. */
	ferry__postq_init(&osrv.scan, ferry__rt.loop, 0, scan);
	if (!osrv.fb_ready) {
		ferry__fb_builder_init(&osrv.fb);
		osrv.fb_ready = true;
	}
	ret = ferry__rt_owner_path(ferry__rt.store_socket, &ferry__rt.self, osrv.path,
				   sizeof(osrv.path));
	if (ret == 0)
		ret = ferry__conn_server_listen_unix(ferry__rt.loop, osrv.path, &so, &osrv.server);
	if (ret < 0)
		FLOG_WARN(COMP, "owner socket %s: %s (borrowers cannot reach this owner)",
			  osrv.path, ferry_strerror(ret));
	return ret;
}

int ferry__rt_owner_srv_stop(void *arg)
{
	(void)arg;
	/* The close frees the server later (or the loop's destroy does, which leaves the file):
	 * the file goes now, so that nothing of this owner is left once shutdown returns. */
	if (osrv.server)
		unlink(osrv.path);
	ferry__conn_server_close(osrv.server);
	osrv.server = NULL;
	scan(&osrv.scan, NULL, -ECANCELED); /* pending gets: -ENOENT, the owner is going */
	if (osrv.fb_ready)
		ferry__fb_builder_fini(&osrv.fb);
	osrv.fb_ready = false;
	return 0;
}
