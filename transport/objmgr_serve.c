/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The serving side of the object manager, on its loop: accept other nodes' TCP engine
 * endpoints (token handshake), answer each PullRequest from the own store.
 *
 * DESIGN
 * - Inline requests (small objects, a pull's first request): the range is copied into the
 *   reply under a pin that is released right after (plasma get without waiting).
 * - Stream requests: the reply (status 0) goes first, then the range as a TCP engine data
 *   transfer straight from the arena (SENDMSG_ZC for large chunks). The pin moves to the
 *   transfer and is released in its callback, which the engine runs once the kernel no longer
 *   reads the arena: at success, at the puller's disconnect, at the engine's deadline, or when
 *   the endpoint is destroyed. So a dead puller never leaves a pin behind.
 * - Every range is checked against the object's size before a byte is read: an absent object,
 *   a range past its end (an inline length is clipped to it), or an RDMA request (not served
 *   here) gets an error reply and the endpoint stays. A malformed message ends the endpoint.
 */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/frame.h"
#include "common/log.h"
#include "common/wire.h"
#include "plasma/server.h"
#include "transport/objmgr_int.h"

#define COMP "objmgr"

static int check_range(uint64_t offset, uint64_t len, uint64_t size)
{
	return offset > size || len > size - offset ? -EINVAL : 0;
}

int ferry__objmgr_request_check(uint16_t type, const void *payload, size_t len)
{
	struct ferry__wire_pull_request_view v;

	if (type != FERRY__WIRE_MSG_PULL_REQUEST && type != FERRY__WIRE_MSG_PULL_DONE)
		return -EPROTO;
	if (ferry__wire_verify(type, payload, len) < 0)
		return -EPROTO;
	if (type == FERRY__WIRE_MSG_PULL_DONE)
		return 0;
	v = ferry__wire_pull_request_root_verified(payload);
	if (ferry__wire_pull_request_offset(v) > UINT64_MAX - ferry__wire_pull_request_len(v))
		return -EINVAL;
	return 0;
}

/* The reply's status and, on success, its data (inline) or range (stream) from @view. */
static int fill_reply(struct ferry__wire_pull_request_view v, const struct ferry_plasma_view *view,
		      struct ferry__wire_pull_reply *m, uint64_t *range)
{
	uint64_t offset = ferry__wire_pull_request_offset(v);
	uint64_t len = ferry__wire_pull_request_len(v);
	bool stream = ferry__wire_pull_request_stream(v);

	m->data_size = view->data_size;
	/* A first request asks for more than small objects have: an inline range is clipped. */
	if (!stream && offset <= view->data_size && len > view->data_size - offset)
		len = view->data_size - offset;
	if (check_range(offset, len, view->data_size) < 0) {
		FLOG_WARN(COMP, "pull of [%llu, +%llu) of an object of %llu bytes",
			  (unsigned long long)offset, (unsigned long long)len,
			  (unsigned long long)view->data_size);
		return -EINVAL;
	}
	*range = len;
	if (stream)
		return 0;
	if (offset == 0 && view->metadata_size > FERRY__OBJMGR_MAX_METADATA)
		return -E2BIG;
	if (len > FERRY__OBJMGR_MAX_CHUNK)
		*range = len = FERRY__OBJMGR_MAX_CHUNK;
	m->data = (const uint8_t *)view->data + offset;
	m->data_count = len;
	if (offset == 0) {
		m->metadata = view->metadata;
		m->metadata_count = view->metadata_size;
	}
	return 0;
}

int ferry__objmgr_reply_build(struct ferry__fb_builder *b, const void *req,
			      const struct ferry_plasma_view *view, int status,
			      uint64_t *data_bytes)
{
	struct ferry__wire_pull_request_view v = ferry__wire_pull_request_root_verified(req);
	struct ferry__wire_pull_reply m;

	memset(&m, 0, sizeof(m));
	*data_bytes = 0;
	if (status == 0 && !ferry__wire_pull_request_want_inline(v) &&
	    !ferry__wire_pull_request_stream(v))
		status = -EOPNOTSUPP; /* RDMA reads are not served by this object manager */
	if (status == 0)
		status = fill_reply(v, view, &m, data_bytes);
	if (status < 0) {
		memset(&m, 0, sizeof(m));
		*data_bytes = 0;
	}
	m.xfer = ferry__wire_pull_request_xfer(v);
	m.status = status;
	return ferry__wire_pull_reply_build(b, &m);
}

void *ferry__objmgr_wrap(struct ferry__fb_builder *b, uint16_t type, size_t *len)
{
	uint8_t *p = ferry__fb_builder_headroom(b);

	static_assert(FERRY__OBJMGR_PREFIX == FERRY_FB_HEADROOM, "the prefix fills the headroom");
	static_assert(FERRY__OBJMGR_PREFIX == FERRY_FRAME_HEADER_SIZE, "the prefix is a frame's");
	if (!ferry__fb_builder_data(b))
		return NULL;
	ferry__frame_header_encode(p, type, (uint32_t)ferry__fb_builder_size(b));
	*len = FERRY__OBJMGR_PREFIX + ferry__fb_builder_size(b);
	return p;
}

int ferry__objmgr_send(struct ferry__tcp_ep *ep, struct ferry__fb_builder *b, uint16_t type)
{
	size_t len;
	void *msg = ferry__objmgr_wrap(b, type, &len);

	return msg ? ferry__tcp_send(ep, msg, len) : -EINVAL;
}

int ferry__objmgr_unwrap(const void *buf, size_t len, uint16_t *type, const void **payload,
			 size_t *payload_len)
{
	struct ferry__frame_header h;

	/* The engine's own cap came first (TCP: max_msg; RDMA: its receive buffers). */
	if (len < FERRY__OBJMGR_PREFIX || ferry__frame_header_decode(buf, UINT32_MAX, &h) < 0)
		return -EPROTO;
	if (h.length != len - FERRY__OBJMGR_PREFIX) {
		FLOG_WARN(COMP, "%s frame of %u bytes in a message of %zu",
			  ferry__wire_message_name(h.type), h.length, len - FERRY__OBJMGR_PREFIX);
		return -EPROTO;
	}
	*type = h.type;
	*payload = (const uint8_t *)buf + FERRY__OBJMGR_PREFIX;
	*payload_len = h.length;
	return ferry__wire_verify(*type, *payload, *payload_len) < 0 ? -EPROTO : 0;
}

int ferry__objmgr_unwrap_request(const void *buf, size_t len, uint16_t *type, const void **payload,
				 size_t *payload_len)
{
	int ret = ferry__objmgr_unwrap(buf, len, type, payload, payload_len);

	return ret < 0 ? ret : ferry__objmgr_request_check(*type, *payload, *payload_len);
}

/* A stream's pin: held until the engine no longer reads the object. */
struct stream_pin {
	struct ferry__objmgr *om;      /* whose store */
	struct ferry_plasma_view view; /* the pinned object */
};

static void stream_done(void *arg, int status)
{
	struct stream_pin *pin = arg;

	if (status < 0)
		FLOG_INFO(COMP, "a stream to a puller ended: %s", ferry_strerror(-status));
	(void)ferry_plasma_client_release(pin->om->store, &pin->view);
	ferry__free(pin);
}

/* Start streaming the range; the pin moves to the transfer. 0 or -errno (pin released). */
static int stream_start(struct ferry__objmgr *om, struct ferry__tcp_ep *ep,
			struct ferry__wire_pull_request_view v,
			const struct ferry_plasma_view *view, uint64_t len)
{
	struct stream_pin *pin = ferry__calloc(1, sizeof(*pin));
	uint64_t offset = ferry__wire_pull_request_offset(v);
	int ret;

	if (!pin)
		return -ENOMEM;
	pin->om = om;
	pin->view = *view;
	ret = ferry__tcp_send_data(ep, ferry__wire_pull_request_xfer(v),
				   (const uint8_t *)view->data + offset, len, stream_done, pin);
	if (ret < 0)
		ferry__free(pin);
	return ret;
}

int ferry__objmgr_store_get(struct ferry__objmgr *om, const struct ferry_object_id *id,
			    struct ferry_plasma_view *view)
{
	int ret;

	if (om->opts.store_server)
		return ferry__plasma_server_get_on_loop(om->opts.store_server, om->store, id, view);
	ret = ferry_plasma_client_get(om->store, id, 1, 0, view);
	return ret == -ETIMEDOUT ? -ENOENT : ret;
}

static void serve_pull(struct ferry__objmgr *om, struct ferry__tcp_ep *ep, const void *payload)
{
	struct ferry__wire_pull_request_view v = ferry__wire_pull_request_root_verified(payload);
	struct ferry_object_id id = ferry__wire_pull_request_object_id(v);
	struct ferry__fb_builder *b = &om->serve_fb;
	struct ferry_plasma_view view;
	uint64_t range = 0;
	bool pinned;
	int ret, status;

	status = ferry__objmgr_store_get(om, &id, &view);
	pinned = status == 0;
	ret = ferry__objmgr_reply_build(b, payload, &view, status, &range);
	status = ret == 0 ? ferry__wire_pull_reply_status(
				    ferry__wire_pull_reply_root_verified(ferry__fb_builder_data(b)))
			  : ret;
	/* Counted before the reply leaves: it may go out from inside the send (a small frame is
	 * sent at once, tcp_io.c), and the puller can be done and read these before we return. */
	pthread_mutex_lock(&om->lock);
	om->stats.requests_served++;
	om->stats.requests_refused += status < 0;
	om->stats.bytes_served += status < 0 ? 0 : range;
	pthread_mutex_unlock(&om->lock);
	if (ret == 0 && status == 0 && ferry__wire_pull_request_stream(v)) {
		/* The reply goes first: the puller learns of a refusal before any data. */
		ret = ferry__objmgr_send(ep, b, FERRY__WIRE_MSG_PULL_REPLY);
		if (ret == 0)
			ret = stream_start(om, ep, v, &view, range);
		pinned = ret < 0; /* else the transfer holds the pin now */
	} else if (ret == 0) {
		ret = ferry__objmgr_send(ep, b, FERRY__WIRE_MSG_PULL_REPLY);
	}
	if (pinned) /* an inline range was copied into the message */
		(void)ferry_plasma_client_release(om->store, &view);
	if (ret < 0) { /* no reply, or no data after one: the puller must not wait */
		FLOG_WARN(COMP, "cannot answer a pull: %s", ferry_strerror(-ret));
		ferry__tcp_ep_destroy(ep);
	}
}

static void serve_message(struct ferry__tcp_ep *ep, const void *buf, size_t len, void *arg)
{
	struct ferry__objmgr *om = arg;
	const void *payload;
	size_t plen;
	uint16_t type;

	if (ferry__objmgr_unwrap_request(buf, len, &type, &payload, &plen) < 0) {
		FLOG_WARN(COMP, "malformed request from a puller: closing");
		ferry__tcp_ep_destroy(ep);
		return;
	}
	if (type == FERRY__WIRE_MSG_PULL_REQUEST)
		serve_pull(om, ep, payload);
	/* PullDone: RDMA only; nothing is pinned across messages here */
}

static void serve_close(struct ferry__tcp_ep *ep, int reason, void *arg)
{
	(void)arg;
	if (reason != -ECONNRESET)
		FLOG_INFO(COMP, "a puller's endpoint closed: %s", ferry_strerror(-reason));
	ferry__tcp_ep_destroy(ep); /* its streams end with an error: their pins are released */
}

static void serve_connect(struct ferry__tcp_ep *ep, int status, void *arg)
{
	(void)ep;
	(void)arg;
	if (status < 0)
		FLOG_INFO(COMP, "a puller failed to connect: %s", ferry_strerror(-status));
}

static const struct ferry__tcp_ep_cbs serve_cbs = {
	.on_connect = serve_connect,
	.on_message = serve_message,
	.on_close = serve_close,
};

int ferry__objmgr_serve_start(struct ferry__objmgr *om)
{
	struct ferry__tcp_ctx_opts to = {0};
	int ret;

	to.loop = om->loop;
	to.token = om->token;
	to.token_size = om->opts.token_len;
	to.conns_per_peer = 2;
	to.chunk_size = om->opts.chunk_bytes;
	to.max_msg = FERRY__OBJMGR_MAX_MESSAGE;
	to.connect_timeout_ms = om->opts.timeout_ms;
	to.op_timeout_ms = om->opts.timeout_ms;
	to.poll_us = om->opts.spin_us; /* the loop polls the control sockets while it spins */
	/* A puller that pipelines requests and never reads the (inline, copied) replies. */
	to.max_queued_bytes = om->opts.max_queued_bytes ? om->opts.max_queued_bytes
							: FERRY__OBJMGR_DEFAULT_MAX_QUEUED;
	to.stall_timeout_ms = om->opts.stall_timeout_ms ? om->opts.stall_timeout_ms
							: FERRY__OBJMGR_DEFAULT_STALL_MS;
	ret = ferry__tcp_ctx_create(&to, &om->tcp);
	if (ret < 0)
		return ret;
	ret = ferry__tcp_listen(om->tcp, om->ip, om->opts.port, &serve_cbs, om, &om->listener);
	if (ret < 0) {
		FLOG_ERROR(COMP, "cannot listen on %s:%u: %s", om->ip, om->opts.port,
			   ferry_strerror(-ret));
		return ret;
	}
	om->port = ferry__tcp_listener_port(om->listener);
	return 0;
}
