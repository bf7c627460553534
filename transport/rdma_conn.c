/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine, part two: connections over rdma_cm. Listen/accept and connect, the handshake
 * carried in the connect private data (token, version, receive depth and buffer size), the
 * endpoint state machine fed by rdma_cm events, and teardown. See the DESIGN block in rdma.c.
 *
 * The handshake's messages and their checks are rdma_hs.c's.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/rdma_hs.h"
#include "transport/rdma_int.h"

#define LISTEN_BACKLOG 128
#define RESOLVE_TIMEOUT_MS 2000
#define RETRY_COUNT 7
#define RNR_RETRY_COUNT 3	 /* credits make RNR impossible; if it happens, fail, don't spin */
#define REJ_INVALID_SERVICE_ID 8 /* IB CM reject reason: nobody listens there */

/* What we keep of an rdma_cm event: it is acked before it is handled. */
struct cm_event {
	enum rdma_cm_event_type type; /* event */
	int status;		      /* event status (reject reason for REJECTED) */
	struct rdma_cm_id *id;	      /* the id it is about */
	struct rdma_cm_id *listen_id; /* CONNECT_REQUEST: the listener */
	uint8_t initiator_depth;      /* CONNECT_REQUEST: the peer's READ depth */
	uint8_t responder_resources;  /* CONNECT_REQUEST: READs the peer answers at once */
	uint8_t private_len;	      /* bytes in private_data */
	uint8_t private_data[64];     /* the start of the private data */
};

static const char *peer_str(struct rdma_cm_id *id, char *buf, size_t size)
{
	struct sockaddr *sa = rdma_get_peer_addr(id);
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
	snprintf(buf, size, "%s:%u", ip, ntohs(rdma_get_dst_port(id)));
	return buf;
}

static int ep_alloc(struct ferry__rdma_ctx *ctx, const struct ferry__rdma_ep_cbs *cbs, void *arg,
		    struct ferry__rdma_ep **out)
{
	struct ferry__rdma_ep *ep = ferry__calloc(1, sizeof(*ep));
	int err;

	if (!ep)
		return -ENOMEM;
	ep->owner = RDMA_OWNER_EP;
	ep->ctx = ctx;
	ep->cbs = *cbs;
	ep->arg = arg;
	ep->slot = UINT32_MAX;
	ferry__rdma_list_init(&ep->link);
	ferry__rdma_list_init(&ep->sendq);
	ferry__rdma_list_init(&ep->reads);
	err = ferry__rdma_ep_io_init(ep);
	if (!err)
		err = ferry__rdma_slot_add(ctx, ep);
	if (!err)
		err = ferry__rdma_cq_reserve(ctx, ep->recv_depth + ep->send_slots + ep->max_reads);
	if (err) {
		ferry__rdma_ep_free(ep);
		return err;
	}
	ep->cq_entries = ep->recv_depth + ep->send_slots + ep->max_reads;
	*out = ep;
	return 0;
}

void ferry__rdma_ep_free(struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_ctx *ctx = ep->ctx;

	if (ep->id) {
		if (ep->id->qp)
			rdma_destroy_qp(ep->id);
		rdma_destroy_id(ep->id);
	}
	ferry__rdma_ep_io_fini(ep);
	if (ep->slot != UINT32_MAX) {
		ctx->slots[ep->slot].ep = NULL;
		ctx->slots[ep->slot].gen++;
	}
	ctx->cq_reserved -= ep->cq_entries;
	ferry__free(ep);
}

static int setup_qp(struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_ctx *ctx = ep->ctx;
	struct ibv_qp_init_attr attr = {
		.send_cq = ctx->cq,
		.recv_cq = ctx->cq,
		.cap = {.max_send_wr = ep->send_slots + ep->max_reads,
			.max_recv_wr = ep->recv_depth,
			.max_send_sge = 1,
			.max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
	};

	if (rdma_create_qp(ep->id, ctx->pd, &attr)) {
		int err = -errno;

		FLOG_ERROR(RDMA_LOG, "%s: creating a QP failed: %s", ctx->device,
			   ferry_strerror(errno));
		return err;
	}
	return ferry__rdma_post_recvs(ep);
}

/* Take the endpoint off the wire: no completions dispatched, QP destroyed, peer told. */
static void stop(struct ferry__rdma_ep *ep, int reason)
{
	struct ferry__rdma_ctx *ctx = ep->ctx;
	enum ferry__rdma_ep_state was = ep->state;

	ep->state = RDMA_EP_CLOSED;
	ep->close_reason = reason;
	ctx->slots[ep->slot].gen++;
	ctx->outstanding -= ep->sends_in_flight + ep->reads_in_flight;
	ep->sends_in_flight = ep->reads_in_flight = 0;
	if (was == RDMA_EP_CONNECTING || was == RDMA_EP_ACCEPTING || was == RDMA_EP_ESTABLISHED)
		rdma_disconnect(ep->id); /* fails harmlessly if the peer went first */
	if (ep->id && ep->id->qp) {
		rdma_destroy_qp(ep->id);
		/* Its completions may still sit in the shared CQ until the next empty poll. */
		ctx->cq_stale += ep->cq_entries;
	}
	ctx->cq_reserved -= ep->cq_entries;
	ep->cq_entries = 0;
}

void ferry__rdma_ep_fail(struct ferry__rdma_ep *ep, int reason)
{
	if (ep->state == RDMA_EP_CLOSED)
		return;
	FLOG_DEBUG(RDMA_LOG, "%s: endpoint %u closes (state %d): %s", ep->ctx->device, ep->slot,
		   ep->state, ferry_strerror(-reason));
	stop(ep, reason);
	ep->flags |= RDMA_EP_CLOSING;
	ferry__rdma_list_add_tail(&ep->ctx->closing, &ep->link);
}

void ferry__rdma_ep_finish_close(struct ferry__rdma_ep *ep)
{
	ferry__rdma_complete_reads(ep, -ECONNRESET, false);
	if (ep->flags & RDMA_EP_DESTROYED)
		return;
	ferry__rdma_drop_sendq(ep);
	if (!(ep->flags & RDMA_EP_REPORTED))
		ferry__rdma_ep_destroy(ep); /* accepted but never shown to the user */
	else if (ep->flags & RDMA_EP_WAS_UP) {
		if (ep->cbs.on_close)
			ep->cbs.on_close(ep, ep->close_reason, ep->arg);
	} else {
		ep->cbs.on_connect(ep, ep->close_reason, ep->arg);
	}
}

void ferry__rdma_ep_established(struct ferry__rdma_ep *ep)
{
	ep->state = RDMA_EP_ESTABLISHED;
	ep->flags |= RDMA_EP_REPORTED | RDMA_EP_WAS_UP;
	ep->listener = NULL;
	ep->deadline_ns = 0;
	ep->credits = ep->peer.recv_depth;
	FLOG_DEBUG(RDMA_LOG, "%s: endpoint %u established", ep->ctx->device, ep->slot);
	ep->cbs.on_connect(ep, 0, ep->arg);
}

void ferry__rdma_ep_destroy(struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_ctx *ctx;

	if (!ep || (ep->flags & RDMA_EP_DESTROYED))
		return;
	ctx = ep->ctx;
	ferry__rdma_enter(ctx);
	ep->flags |= RDMA_EP_DESTROYED;
	if (ep->state != RDMA_EP_CLOSED)
		stop(ep, -ECANCELED);
	if (ep->flags & RDMA_EP_CLOSING) {
		ferry__rdma_list_del(&ep->link);
		ep->flags &= ~RDMA_EP_CLOSING;
	}
	ferry__rdma_complete_reads(ep, -ECANCELED, true);
	ferry__rdma_drop_sendq(ep);
	ferry__rdma_list_add_tail(&ctx->graveyard, &ep->link);
	ferry__rdma_leave(ctx);
}

void ferry__rdma_ep_set_arg(struct ferry__rdma_ep *ep, void *arg)
{
	ep->arg = arg;
}

void *ferry__rdma_ep_arg(const struct ferry__rdma_ep *ep)
{
	return ep->arg;
}

/* Connect: start address resolution; the rest happens in events. */
int ferry__rdma_connect(struct ferry__rdma_ctx *ctx, const char *ip, uint16_t port,
			unsigned timeout_ms, const struct ferry__rdma_ep_cbs *cbs, void *arg,
			struct ferry__rdma_ep **out)
{
	struct sockaddr_storage ss;
	struct ferry__rdma_ep *ep;
	int err;

	if (!cbs || !cbs->on_connect) {
		FLOG_ERROR(RDMA_LOG, "connect: on_connect callback required");
		return -EINVAL;
	}
	err = ferry__rdma_parse_addr(ip, port, &ss);
	if (err)
		return err;
	timeout_ms = timeout_ms ? timeout_ms : ctx->connect_timeout_ms;
	err = ep_alloc(ctx, cbs, arg, &ep);
	if (err)
		return err;
	if (rdma_create_id(ctx->channel, &ep->id, ep, RDMA_PS_TCP)) {
		err = -errno;
		ep->id = NULL;
		goto err_free_ep;
	}
	ep->state = RDMA_EP_RESOLVING_ADDR;
	ep->flags = RDMA_EP_REPORTED;
	ep->deadline_ns = ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
	if (rdma_resolve_addr(ep->id, NULL, (struct sockaddr *)&ss,
			      (int)FERRY_MIN(timeout_ms, RESOLVE_TIMEOUT_MS))) {
		err = -errno;
		FLOG_ERROR(RDMA_LOG, "connect to %s:%u: %s", ip, port, ferry_strerror(errno));
		goto err_free_ep;
	}
	ferry__rdma_note_deadline(ctx, ep->deadline_ns);
	*out = ep;
	return 0;

err_free_ep:
	ferry__rdma_ep_free(ep);
	return err;
}

static void route_resolved(struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_ctx *ctx = ep->ctx;
	uint8_t h[FERRY__RDMA_HELLO_BYTES];
	struct rdma_conn_param param = {
		.private_data = h,
		.private_data_len = sizeof(h),
		.responder_resources = ctx->max_rd_atom,
		.initiator_depth = (uint8_t)FERRY_MIN(ctx->max_init_rd_atom, ep->max_reads),
		.retry_count = RETRY_COUNT,
		.rnr_retry_count = RNR_RETRY_COUNT,
	};
	int err = setup_qp(ep);

	if (err) {
		ferry__rdma_ep_fail(ep, err);
		return;
	}
	ferry__rdma_hello_write(h,
				&(struct ferry__rdma_terms){.recv_depth = (uint16_t)ep->recv_depth,
							    .msg_size = ep->msg_size},
				ctx->token_len, ctx->token);
	if (rdma_connect(ep->id, &param)) {
		err = -errno;
		FLOG_ERROR(RDMA_LOG, "%s: rdma_connect: %s", ctx->device, ferry_strerror(errno));
		ferry__rdma_ep_fail(ep, err);
		return;
	}
	ep->state = RDMA_EP_CONNECTING;
}

static void addr_resolved(struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_ctx *ctx = ep->ctx;
	uint64_t now = ferry__now_ns();
	int timeout_ms = RESOLVE_TIMEOUT_MS;

	if (ep->id->verbs != ctx->verbs) {
		FLOG_ERROR(RDMA_LOG, "the peer routes through %s, not this context's %s",
			   ep->id->verbs ? ibv_get_device_name(ep->id->verbs->device) : "no device",
			   ctx->device);
		ferry__rdma_ep_fail(ep, -ENETUNREACH);
		return;
	}
	if (ep->deadline_ns > now)
		timeout_ms = (int)FERRY_MIN((ep->deadline_ns - now) / 1000000 + 1,
					    (uint64_t)RESOLVE_TIMEOUT_MS);
	if (rdma_resolve_route(ep->id, timeout_ms)) {
		ferry__rdma_ep_fail(ep, -errno);
		return;
	}
	ep->state = RDMA_EP_RESOLVING_ROUTE;
}

static void connect_established(struct ferry__rdma_ep *ep, const struct cm_event *ev)
{
	struct ferry__rdma_terms t;

	if (ferry__rdma_welcome_read(ev->private_data, ev->private_len, &t) < 0) {
		FLOG_ERROR(RDMA_LOG, "%s: the acceptor's reply is not Ferry's (or another version)",
			   ep->ctx->device);
		ferry__rdma_ep_fail(ep, -EPROTO);
		return;
	}
	ep->peer = t;
	ferry__rdma_ep_established(ep);
}

static int event_errno(const struct cm_event *ev, int fallback)
{
	return ev->status < 0 ? ev->status : fallback;
}

static void ep_event(struct ferry__rdma_ep *ep, const struct cm_event *ev)
{
	enum ferry__rdma_ep_state s = ep->state;

	switch (ev->type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (s == RDMA_EP_RESOLVING_ADDR)
			addr_resolved(ep);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (s == RDMA_EP_RESOLVING_ROUTE)
			route_resolved(ep);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (s == RDMA_EP_CONNECTING)
			connect_established(ep, ev);
		else if (s == RDMA_EP_ACCEPTING)
			ferry__rdma_ep_established(ep);
		break;
	case RDMA_CM_EVENT_REJECTED:
		ferry__rdma_ep_fail(
			ep, ev->status == REJ_INVALID_SERVICE_ID
				    ? -ECONNREFUSED
				    : ferry__rdma_refusal_read(ev->private_data, ev->private_len));
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
		ferry__rdma_ep_fail(ep, event_errno(ev, -EHOSTUNREACH));
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		ferry__rdma_ep_fail(ep, event_errno(ev, -ENETUNREACH));
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		ferry__rdma_ep_fail(ep, event_errno(ev, -ECONNREFUSED));
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		ferry__rdma_ep_fail(ep, ev->status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* Completions that came before the peer's disconnect may tell the real cause (a
		 * remote access error makes the peer drop the connection): take them first. */
		if (s == RDMA_EP_ESTABLISHED)
			ferry__rdma_poll_cq(ep->ctx);
		ferry__rdma_ep_fail(ep, -ECONNRESET);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ferry__rdma_ep_fail(ep, -ENODEV);
		break;
	default: /* TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do */
		break;
	}
}

static void refuse(struct rdma_cm_id *id, int err)
{
	uint8_t r[FERRY__RDMA_REFUSAL_BYTES];

	ferry__rdma_refusal_write(r, err);
	rdma_reject(id, r, sizeof(r));
}

/* Accept: validate, build the endpoint and its QP, reply. Failures reject, never crash. */
static void connect_request(struct ferry__rdma_listener *l, const struct cm_event *ev)
{
	struct ferry__rdma_ctx *ctx = l->ctx;
	struct ferry__rdma_ep *ep;
	uint8_t w[FERRY__RDMA_WELCOME_BYTES];
	struct rdma_conn_param param = {.private_data = w, .private_data_len = sizeof(w)};
	struct ferry__rdma_terms t;
	uint64_t region_addr;
	char peer[INET6_ADDRSTRLEN + 8];
	int err = ferry__rdma_hello_read(ev->private_data, ev->private_len, ctx->token_len,
					 ctx->token, &t);

	if (err) {
		FLOG_WARN(RDMA_LOG, "%s: refused a connection from %s: %s", ctx->device,
			  peer_str(ev->id, peer, sizeof(peer)),
			  err == -EACCES ? "wrong cluster token" : "not Ferry's protocol version");
		goto err_refuse;
	}
	err = ep_alloc(ctx, &l->cbs, l->arg, &ep);
	if (err) {
		FLOG_WARN(RDMA_LOG, "%s: refused a connection from %s: %s", ctx->device,
			  peer_str(ev->id, peer, sizeof(peer)), ferry_strerror(err));
		goto err_refuse;
	}
	ep->id = ev->id;
	ep->id->context = ep;
	ep->listener = l;
	ep->peer = t; /* a hello names no region */
	err = setup_qp(ep);
	if (err)
		goto err_free_ep;
	/* Our terms, and our region: the connector may READ from it before asking anything. */
	t = (struct ferry__rdma_terms){.recv_depth = (uint16_t)ep->recv_depth,
				       .msg_size = ep->msg_size,
				       .region_len = ctx->region_size};
	ferry__rdma_ctx_region(ctx, &region_addr, &t.region_rkey);
	t.region_addr = region_addr;
	ferry__rdma_welcome_write(w, &t);
	param.responder_resources = FERRY_MIN(ev->initiator_depth, ctx->max_rd_atom);
	param.initiator_depth = FERRY_MIN(ev->responder_resources, ctx->max_init_rd_atom);
	param.retry_count = RETRY_COUNT;
	param.rnr_retry_count = RNR_RETRY_COUNT;
	if (rdma_accept(ep->id, &param)) {
		err = -errno;
		goto err_free_ep;
	}
	ep->state = RDMA_EP_ACCEPTING;
	ep->deadline_ns = ferry__now_ns() + (uint64_t)ctx->connect_timeout_ms * 1000000u;
	ferry__rdma_note_deadline(ctx, ep->deadline_ns);
	return;

err_free_ep:
	FLOG_WARN(RDMA_LOG, "%s: accepting a connection failed: %s", ctx->device,
		  ferry_strerror(-err));
	refuse(ep->id, -ECONNREFUSED);
	ferry__rdma_ep_free(ep); /* destroys the id */
	return;
err_refuse:
	refuse(ev->id, err);
	rdma_destroy_id(ev->id);
}

static void copy_event(const struct rdma_cm_event *src, struct cm_event *dst)
{
	dst->type = src->event;
	dst->status = src->status;
	dst->id = src->id;
	dst->listen_id = src->listen_id;
	dst->initiator_depth = src->param.conn.initiator_depth;
	dst->responder_resources = src->param.conn.responder_resources;
	dst->private_len =
		(uint8_t)FERRY_MIN(src->param.conn.private_data_len, sizeof(dst->private_data));
	if (!src->param.conn.private_data)
		dst->private_len = 0;
	if (dst->private_len)
		memcpy(dst->private_data, src->param.conn.private_data, dst->private_len);
}

int ferry__rdma_handle_cm_event(struct ferry__rdma_ctx *ctx, struct rdma_cm_event *raw)
{
	struct cm_event ev;
	enum ferry__rdma_owner *owner;

	copy_event(raw, &ev);
	rdma_ack_cm_event(raw);
	if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		connect_request((struct ferry__rdma_listener *)ev.listen_id->context, &ev);
		return 0;
	}
	owner = ev.id ? (enum ferry__rdma_owner *)ev.id->context : NULL;
	if (owner && *owner == RDMA_OWNER_EP) {
		ep_event((struct ferry__rdma_ep *)(void *)owner, &ev);
	} else if (ev.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
		FLOG_ERROR(RDMA_LOG, "%s: device removed; the context is unusable", ctx->device);
	} else {
		FLOG_DEBUG(RDMA_LOG, "%s: %s ignored", ctx->device, rdma_event_str(ev.type));
	}
	return 0;
}

/* Listen. */
int ferry__rdma_listen(struct ferry__rdma_ctx *ctx, const char *ip, uint16_t port,
		       const struct ferry__rdma_ep_cbs *cbs, void *arg,
		       struct ferry__rdma_listener **out)
{
	struct sockaddr_storage ss;
	struct ferry__rdma_listener *l;
	int err;

	if (!cbs || !cbs->on_connect) {
		FLOG_ERROR(RDMA_LOG, "listen: on_connect callback required");
		return -EINVAL;
	}
	err = ferry__rdma_parse_addr(ip, port, &ss);
	if (err)
		return err;
	l = ferry__calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->owner = RDMA_OWNER_LISTENER;
	l->ctx = ctx;
	l->cbs = *cbs;
	l->arg = arg;
	if (rdma_create_id(ctx->channel, &l->id, l, RDMA_PS_TCP)) {
		err = -errno;
		goto err_free;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss)) {
		err = errno == EADDRNOTAVAIL ? -EINVAL : -errno;
		FLOG_ERROR(RDMA_LOG, "listen on %s:%u: %s", ip, port, ferry_strerror(errno));
		goto err_destroy_id;
	}
	if (l->id->verbs != ctx->verbs) {
		err = -ENODEV;
		FLOG_ERROR(RDMA_LOG, "listen on %s: not an address of %s", ip, ctx->device);
		goto err_destroy_id;
	}
	if (rdma_listen(l->id, LISTEN_BACKLOG)) {
		err = -errno;
		goto err_destroy_id;
	}
	l->port = ntohs(rdma_get_src_port(l->id));
	ferry__rdma_list_add_tail(&ctx->listeners, &l->link);
	FLOG_DEBUG(RDMA_LOG, "%s: listening on %s:%u", ctx->device, ip, l->port);
	*out = l;
	return 0;

err_destroy_id:
	rdma_destroy_id(l->id);
err_free:
	ferry__free(l);
	return err;
}

uint16_t ferry__rdma_listener_port(const struct ferry__rdma_listener *l)
{
	return l->port;
}

void ferry__rdma_listener_destroy(struct ferry__rdma_listener *l)
{
	struct ferry__rdma_ctx *ctx;

	if (!l)
		return;
	ctx = l->ctx;
	ferry__rdma_enter(ctx);
	for (uint32_t i = 0; i < ctx->slot_count; i++) {
		struct ferry__rdma_ep *ep = ctx->slots[i].ep;

		if (ep && ep->listener == l && !(ep->flags & RDMA_EP_REPORTED))
			ferry__rdma_ep_destroy(ep);
	}
	rdma_destroy_id(l->id);
	ferry__rdma_list_del(&l->link);
	ferry__free(l);
	ferry__rdma_leave(ctx);
}
