/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine, part one of three: the context (device, protection domain, one completion queue,
 * the arena's memory region), ferry__rdma_progress() with completion dispatch, deadlines and
 * fault injection. Connections live in rdma_conn.c, messages and READs in rdma_io.c.
 *
 * DESIGN
 *
 * Progress. Everything runs on the context's thread, inside the public calls. The caller polls
 * two non-blocking fds (rdma_cm event channel, CQ completion channel) and calls progress,
 * which runs four phases in order:
 *   1. rdma_cm events. Each event is copied (private data included) and acked at once, so
 *      destroying an id never waits on an event we hold, then fed to the endpoint state machine:
 *        connect: RESOLVING_ADDR -> RESOLVING_ROUTE -> CONNECTING -> ESTABLISHED
 *        accept:  CONNECT_REQUEST (token and version checked, else rdma_reject with a reason)
 *                 -> ACCEPTING -> ESTABLISHED (on the event, or on the first receive
 *                 completion, which may arrive before it)
 *        any state -> CLOSED (error event, failed completion, deadline, destroy).
 *   2. Completions: drain the channel, re-arm, poll until empty. A wr_id carries the endpoint's
 *      slot and generation; a completion of a torn-down endpoint (flushes, or a completion of a
 *      destroyed QP left in the shared CQ) no longer matches and is dropped.
 *   3. Deadlines: connect/accept deadlines and per-READ deadlines, scanned when the earliest one
 *      passes (ferry__rdma_ctx_timeout_ms() tells the caller when that is).
 *   4. Closing: callbacks of endpoints torn down since the last pass.
 *
 * Errors. ferry__rdma_ep_fail() records the first reason, takes the endpoint out of completion
 * dispatch (generation bump), disconnects (the peer gets DISCONNECTED) and destroys the QP at
 * once: from then on the device touches none of our buffers, so callbacks may hand them back.
 * It queues the endpoint on ctx->closing; phase 4 gives each outstanding READ -ECONNRESET (or
 * its own -EFAULT/-ETIMEDOUT/-EIO), drops queued messages, then calls on_close (on_connect for
 * one that never came up). Failures found inside a submit call thus never call back from it.
 * ferry__rdma_ep_destroy() does the same synchronously with -ECANCELED and no on_close.
 * A DISCONNECTED event first polls the CQ: the completion that made the peer leave (a remote
 * access error, -EFAULT) is then reported rather than a plain -ECONNRESET.
 *
 * Buffers. The arena belongs to the caller; it is registered once here (local write, remote
 * read, never remote write). Each endpoint owns a slab (receive buffers, then send slots) with
 * its own local-only registration: messages are copied into a send slot; a receive buffer is
 * lent to on_message and reposted when it returns. READs land in the caller's arena memory.
 *
 * Flow control. Each side posts R receives and tells the peer R in the handshake; every SEND
 * uses one credit; the receiver returns credits in the immediate data of its next SEND, or in
 * a credit-only SEND once it owes >= R/2 and no data can go out now. Data needs two credits and a
 * credit-only SEND one: the last credit is kept for returning credits, so two peers flooding
 * each other cannot deadlock, and a credit-only SEND is never answered by another one at once
 * (R >= 4), so they cannot ping-pong.
 *
 * Lifetime. Callbacks may destroy endpoints (their own too): entry points that run callbacks
 * nest a depth counter; a destroyed endpoint is finished at once but its memory waits on the
 * graveyard until the outermost entry point returns.
 *
 * Busy poll. The CQ is polled on every progress call; with busy_poll the completion event is
 * armed only when nothing is in flight, and ferry__rdma_ctx_timeout_ms() returns 0 while
 * something is, so the caller spins while it expects completions and sleeps when idle. With
 * caller_arms (a caller whose thread spins anyway: the object manager's loop with --spin-us)
 * only ferry__rdma_poll(ctx, true), called before the caller sleeps, arms it; while the caller
 * spins it polls. Measured in the soft-RoCE VM: rxe runs a loopback exchange inside the
 * sender's ibv_post_send, the receiver's completion included, and an armed CQ adds the
 * completion tasklet, the event and the poll wake-up to it: a probe's post took 0.21 ms at p50,
 * 0.12 ms with the CQs polled, and an 8 B pull with busy-polling loops 0.65-0.77 -> 0.48-0.53 ms.
 *
 * Not done: several QPs per peer (open several endpoints instead), reacting to the device's
 * async events (errors surface through completions and rdma_cm events), rebuilding a context
 * after DEVICE_REMOVAL (its endpoints fail with -ENODEV; the context must be destroyed).
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/rdma_int.h"

#define DEFAULT_RECV_DEPTH 32
#define DEFAULT_MSG_SIZE 4096
#define DEFAULT_MAX_READS 32
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_OP_TIMEOUT_MS 30000
#define RESOLVE_TIMEOUT_MS 2000
#define INITIAL_CQ_SIZE 1024
#define POLL_BATCH 32
#define MAX_SLOTS 0xffff

int ferry__rdma_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (ip && inet_pton(AF_INET, ip, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons(port);
		return 0;
	}
	if (ip && inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		return 0;
	}
	FLOG_ERROR(RDMA_LOG, "'%s' is not an IPv4 or IPv6 address", ip ? ip : "(null)");
	return -EINVAL;
}

int ferry__rdma_wc_errno(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_REM_ACCESS_ERR:
		return -EFAULT;
	case IBV_WC_RETRY_EXC_ERR:
		return -ETIMEDOUT;
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ECONNRESET;
	default:
		return -EIO;
	}
}

void ferry__rdma_enter(struct ferry__rdma_ctx *ctx)
{
	ctx->depth++;
}

void ferry__rdma_leave(struct ferry__rdma_ctx *ctx)
{
	assert(ctx->depth > 0);
	if (--ctx->depth)
		return;
	while (!ferry__rdma_list_empty(&ctx->graveyard)) {
		struct ferry__rdma_ep *ep =
			FERRY_CONTAINER_OF(ctx->graveyard.next, struct ferry__rdma_ep, link);

		ferry__rdma_list_del(&ep->link);
		ferry__rdma_ep_free(ep);
	}
}

int ferry__rdma_slot_add(struct ferry__rdma_ctx *ctx, struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_slot *slots;
	uint32_t i, count;

	for (i = 0; i < ctx->slot_count; i++)
		if (!ctx->slots[i].ep)
			break;
	if (i == ctx->slot_count) {
		if (ctx->slot_count >= MAX_SLOTS)
			return -ENOBUFS;
		count = ctx->slot_count ? FERRY_MIN(ctx->slot_count * 2, MAX_SLOTS) : 16;
		slots = ferry__realloc(ctx->slots, count * sizeof(*slots));
		if (!slots)
			return -ENOMEM;
		memset(slots + ctx->slot_count, 0, (count - ctx->slot_count) * sizeof(*slots));
		ctx->slots = slots;
		ctx->slot_count = count;
	}
	ctx->slots[i].ep = ep;
	ep->slot = i;
	ep->gen = ctx->slots[i].gen;
	return 0;
}

/* Reserve CQ room for one more QP, growing the CQ if needed; -ENOBUFS if it cannot grow. */
int ferry__rdma_cq_reserve(struct ferry__rdma_ctx *ctx, uint32_t entries)
{
	uint32_t need = ctx->cq_reserved + ctx->cq_stale + entries;

	if (need > ctx->cq_size) {
		uint32_t size = FERRY_MAX(need, ctx->cq_size * 2);
		int err = ibv_resize_cq(ctx->cq, (int)size);

		if (err) {
			FLOG_ERROR(RDMA_LOG, "%s: cannot grow the CQ to %u entries: %s",
				   ctx->device, size, ferry_strerror(err));
			return -ENOBUFS;
		}
		ctx->cq_size = (uint32_t)ctx->cq->cqe;
	}
	ctx->cq_reserved += entries;
	return 0;
}

void ferry__rdma_note_deadline(struct ferry__rdma_ctx *ctx, uint64_t deadline_ns)
{
	if (!ctx->next_deadline_ns || deadline_ns < ctx->next_deadline_ns)
		ctx->next_deadline_ns = deadline_ns;
}

static void set_token(struct ferry__rdma_ctx *ctx, const void *token, size_t size)
{
	/* Connect private data is 56 bytes: a longer token travels as a 40-byte digest that both
	 * sides compute alike. Like the TCP handshake's token, it is a cluster-membership check,
	 * not protection against an attacker on the wire. */
	if (size <= FERRY__RDMA_TOKEN_MAX) {
		if (size)
			memcpy(ctx->token, token, size);
		ctx->token_len = (uint8_t)size;
		return;
	}
	for (unsigned i = 0; i < FERRY__RDMA_TOKEN_MAX / 8; i++) {
		uint64_t h = ferry__hash_bytes(token, size, 0x46525244u + i);

		for (unsigned b = 0; b < 8; b++) /* little-endian whatever the host */
			ctx->token[8 * i + b] = (uint8_t)(h >> (8 * b));
	}
	ctx->token_len = 0xff;
}

static int check_opts(const struct ferry__rdma_ctx_opts *o)
{
	if (!o || !o->ip || !o->region || !o->region_size) {
		FLOG_ERROR(RDMA_LOG, "context: ip and a non-empty region are required");
		return -EINVAL;
	}
	if (o->recv_depth && (o->recv_depth < 4 || o->recv_depth > 0xffff)) {
		FLOG_ERROR(RDMA_LOG, "context: recv_depth %u outside 4..65535", o->recv_depth);
		return -EINVAL;
	}
	if (o->msg_size && (o->msg_size < 64 || o->msg_size > (1u << 20))) {
		FLOG_ERROR(RDMA_LOG, "context: msg_size %u outside 64..1048576", o->msg_size);
		return -EINVAL;
	}
	if (o->max_reads > 0xffffff || (o->token_size && !o->token)) {
		FLOG_ERROR(RDMA_LOG, "context: max_reads %u too large or token missing",
			   o->max_reads);
		return -EINVAL;
	}
	return 0;
}

static void apply_opts(struct ferry__rdma_ctx *ctx, const struct ferry__rdma_ctx_opts *o)
{
	ctx->owner = RDMA_OWNER_CTX;
	ctx->region = o->region;
	ctx->region_size = o->region_size;
	ctx->recv_depth = o->recv_depth ? o->recv_depth : DEFAULT_RECV_DEPTH;
	ctx->msg_size = o->msg_size ? o->msg_size : DEFAULT_MSG_SIZE;
	ctx->max_reads = o->max_reads ? o->max_reads : DEFAULT_MAX_READS;
	ctx->connect_timeout_ms =
		o->connect_timeout_ms ? o->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
	ctx->op_timeout_ms = o->op_timeout_ms ? o->op_timeout_ms : DEFAULT_OP_TIMEOUT_MS;
	ctx->busy_poll = o->busy_poll != 0;
	ctx->caller_arms = o->caller_arms != 0;
	set_token(ctx, o->token, o->token_size);
	ferry__rdma_list_init(&ctx->listeners);
	ferry__rdma_list_init(&ctx->closing);
	ferry__rdma_list_init(&ctx->graveyard);
}

static int set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* Wait (bounded) for the address resolution of the device id, the only blocking step. */
static int wait_resolved(struct ferry__rdma_ctx *ctx)
{
	struct pollfd pfd = {.fd = ctx->channel->fd, .events = POLLIN};
	uint64_t deadline = ferry__now_ms() + RESOLVE_TIMEOUT_MS + 500;
	struct rdma_cm_event *ev;

	for (;;) {
		uint64_t now = ferry__now_ms();
		int type, status;

		if (now >= deadline)
			return -ETIMEDOUT;
		if (poll(&pfd, 1, (int)(deadline - now)) < 0 && errno != EINTR)
			return -errno;
		if (rdma_get_cm_event(ctx->channel, &ev)) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		type = ev->event;
		status = ev->status;
		rdma_ack_cm_event(ev);
		if (type == RDMA_CM_EVENT_ADDR_RESOLVED)
			return 0;
		return status < 0 ? status : -EHOSTUNREACH;
	}
}

/* Find the device that routes to @ip: bind if the address is local, else resolve a route. */
static int open_device(struct ferry__rdma_ctx *ctx, const char *ip)
{
	struct sockaddr_storage ss;
	int err = ferry__rdma_parse_addr(ip, 0, &ss);

	if (err)
		return err;
	if (rdma_create_id(ctx->channel, &ctx->dev_id, ctx, RDMA_PS_TCP))
		return -errno;
	if (rdma_bind_addr(ctx->dev_id, (struct sockaddr *)&ss) == 0 && ctx->dev_id->verbs)
		return 0;
	/* Not a local RDMA address: a bound id cannot resolve from another source, start over. */
	rdma_destroy_id(ctx->dev_id);
	if (rdma_create_id(ctx->channel, &ctx->dev_id, ctx, RDMA_PS_TCP)) {
		ctx->dev_id = NULL;
		return -errno;
	}
	if (rdma_resolve_addr(ctx->dev_id, NULL, (struct sockaddr *)&ss, RESOLVE_TIMEOUT_MS))
		err = -errno;
	else
		err = wait_resolved(ctx);
	if (!err && !ctx->dev_id->verbs)
		err = -ENODEV;
	return err;
}

static void query_device(struct ferry__rdma_ctx *ctx)
{
	struct ibv_device_attr attr;
	struct ibv_port_attr port;

	snprintf(ctx->device, sizeof(ctx->device), "%s", ibv_get_device_name(ctx->verbs->device));
	ctx->max_rd_atom = 16;
	ctx->max_init_rd_atom = 16;
	ctx->max_chunk = 1u << 30;
	if (ibv_query_device(ctx->verbs, &attr) == 0) {
		ctx->max_rd_atom = (uint8_t)FERRY_MIN(attr.max_qp_rd_atom, 255);
		ctx->max_init_rd_atom = (uint8_t)FERRY_MIN(attr.max_qp_init_rd_atom, 255);
	}
	if (ibv_query_port(ctx->verbs, ctx->dev_id->port_num, &port) == 0 && port.max_msg_sz)
		ctx->max_chunk = (uint32_t)FERRY_MIN(port.max_msg_sz, 1u << 30);
}

/* Protection domain, completion channel + CQ, and the arena's registration. */
static int open_verbs(struct ferry__rdma_ctx *ctx)
{
	int err;

	ctx->pd = ibv_alloc_pd(ctx->verbs);
	if (!ctx->pd)
		return errno ? -errno : -ENOMEM;
	ctx->comp = ibv_create_comp_channel(ctx->verbs);
	if (!ctx->comp)
		return errno ? -errno : -ENOMEM;
	err = set_nonblock(ctx->comp->fd);
	if (err)
		return err;
	ctx->cq = ibv_create_cq(ctx->verbs, INITIAL_CQ_SIZE, ctx, ctx->comp, 0);
	if (!ctx->cq)
		return errno ? -errno : -ENOMEM;
	ctx->cq_size = (uint32_t)ctx->cq->cqe;
	ctx->mr = ibv_reg_mr(ctx->pd, ctx->region, ctx->region_size,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!ctx->mr) {
		err = errno ? -errno : -ENOMEM;
		FLOG_ERROR(RDMA_LOG, "%s: registering %zu bytes failed: %s (memlock limit?)",
			   ctx->device, ctx->region_size, ferry_strerror(-err));
		return err;
	}
	return 0;
}

/* Release what open_device()/open_verbs() made; each step tolerates not having happened. */
static void close_verbs(struct ferry__rdma_ctx *ctx)
{
	if (ctx->mr)
		ibv_dereg_mr(ctx->mr);
	if (ctx->cq) {
		if (ctx->cq_events_unacked)
			ibv_ack_cq_events(ctx->cq, ctx->cq_events_unacked);
		ibv_destroy_cq(ctx->cq);
	}
	if (ctx->comp)
		ibv_destroy_comp_channel(ctx->comp);
	if (ctx->pd)
		ibv_dealloc_pd(ctx->pd);
	if (ctx->dev_id)
		rdma_destroy_id(ctx->dev_id);
}

int ferry__rdma_ctx_create(const struct ferry__rdma_ctx_opts *opts, struct ferry__rdma_ctx **out)
{
	struct ferry__rdma_ctx *ctx;
	struct sockaddr_storage ss;
	int err = check_opts(opts);

	if (!err)
		err = ferry__rdma_parse_addr(opts->ip, 0, &ss);
	if (err)
		return err;
	ctx = ferry__calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	apply_opts(ctx, opts);
	ctx->channel = rdma_create_event_channel();
	if (!ctx->channel) {
		err = errno == ENOENT || errno == ENODEV ? -ENODEV : -errno;
		FLOG_WARN(RDMA_LOG, "no rdma_cm event channel: %s (no RDMA stack?)",
			  ferry_strerror(errno));
		goto err_free_ctx;
	}
	err = set_nonblock(ctx->channel->fd);
	if (!err)
		err = open_device(ctx, opts->ip);
	if (err) {
		FLOG_WARN(RDMA_LOG, "no RDMA device routes to %s: %s", opts->ip,
			  ferry_strerror(-err));
		err = err == -ENOMEM ? err : -ENODEV;
		goto err_close_verbs;
	}
	ctx->verbs = ctx->dev_id->verbs;
	query_device(ctx);
	err = open_verbs(ctx);
	if (err)
		goto err_close_verbs;
	FLOG_DEBUG(RDMA_LOG, "%s: context for %s, region %zu bytes rkey 0x%x", ctx->device,
		   opts->ip, ctx->region_size, ctx->mr->rkey);
	*out = ctx;
	return 0;

err_close_verbs:
	close_verbs(ctx);
	rdma_destroy_event_channel(ctx->channel);
err_free_ctx:
	ferry__free(ctx);
	return err;
}

void ferry__rdma_ctx_destroy(struct ferry__rdma_ctx *ctx)
{
	if (!ctx)
		return;
	assert(ctx->depth == 0);
	ferry__rdma_enter(ctx);
	for (uint32_t i = 0; i < ctx->slot_count; i++)
		if (ctx->slots[i].ep)
			ferry__rdma_ep_destroy(ctx->slots[i].ep);
	while (!ferry__rdma_list_empty(&ctx->listeners))
		ferry__rdma_listener_destroy(
			FERRY_CONTAINER_OF(ctx->listeners.next, struct ferry__rdma_listener, link));
	ferry__rdma_leave(ctx);
	close_verbs(ctx);
	rdma_destroy_event_channel(ctx->channel);
	ferry__free(ctx->slots);
	ferry__free(ctx);
}

void ferry__rdma_ctx_fds(const struct ferry__rdma_ctx *ctx, int *cm_fd, int *cq_fd)
{
	if (cm_fd)
		*cm_fd = ctx->channel->fd;
	if (cq_fd)
		*cq_fd = ctx->comp->fd;
}

int ferry__rdma_ctx_timeout_ms(const struct ferry__rdma_ctx *ctx)
{
	uint64_t now;

	if (!ferry__rdma_list_empty(&ctx->closing) || (ctx->busy_poll && ctx->outstanding))
		return 0;
	if (!ctx->next_deadline_ns)
		return -1;
	now = ferry__now_ns();
	if (now >= ctx->next_deadline_ns)
		return 0;
	/* Round up: waking a millisecond early would only spin. */
	return (int)FERRY_MIN((ctx->next_deadline_ns - now + 999999) / 1000000,
			      (uint64_t)INT32_MAX);
}

void ferry__rdma_ctx_region(const struct ferry__rdma_ctx *ctx, uint64_t *addr, uint32_t *rkey)
{
	if (addr)
		*addr = (uint64_t)(uintptr_t)ctx->region;
	if (rkey)
		*rkey = ctx->mr->rkey;
}

int ferry__rdma_ep_peer_region(const struct ferry__rdma_ep *ep, uint64_t *addr, uint64_t *len,
			       uint32_t *rkey)
{
	/* The region comes with the welcome, which only a connector receives (which reads a
	 * region that names no memory as none: rdma_hs.c). */
	if (ep->state != RDMA_EP_ESTABLISHED || !ep->peer.region_addr)
		return -ENODATA;
	*addr = ep->peer.region_addr;
	*len = ep->peer.region_len;
	*rkey = ep->peer.region_rkey;
	return 0;
}

const char *ferry__rdma_ctx_device(const struct ferry__rdma_ctx *ctx)
{
	return ctx->device;
}

void ferry__rdma_inject_fault(struct ferry__rdma_ctx *ctx, enum ferry__rdma_fault fault,
			      unsigned nth)
{
	ctx->fault = fault;
	ctx->fault_countdown = nth;
}

/* Phase 1: rdma_cm events. */
static int drain_cm(struct ferry__rdma_ctx *ctx)
{
	struct rdma_cm_event *ev;
	int n = 0;

	for (;;) {
		if (rdma_get_cm_event(ctx->channel, &ev)) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return n;
			if (errno == EINTR)
				continue;
			FLOG_ERROR(RDMA_LOG, "%s: rdma_get_cm_event: %s", ctx->device,
				   ferry_strerror(errno));
			return -errno;
		}
		n++;
		ferry__rdma_handle_cm_event(ctx, ev);
	}
}

/* Apply an armed fault to a READ completion. Returns true to drop it. */
static bool apply_fault(struct ferry__rdma_ctx *ctx, struct ibv_wc *wc)
{
	if (ctx->fault == FERRY__RDMA_FAULT_NONE)
		return false;
	if (ctx->fault_countdown) {
		ctx->fault_countdown--;
		return false;
	}
	if (ctx->fault == FERRY__RDMA_FAULT_FAIL_READ)
		wc->status = IBV_WC_GENERAL_ERR;
	FLOG_INFO(RDMA_LOG, "%s: injected fault %d on a READ completion", ctx->device, ctx->fault);
	ctx->fault = FERRY__RDMA_FAULT_NONE;
	return wc->status == IBV_WC_SUCCESS;
}

static void dispatch_error(struct ferry__rdma_ep *ep, unsigned kind, uint32_t index,
			   const struct ibv_wc *wc)
{
	int err = ferry__rdma_wc_errno(wc->status);

	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		FLOG_WARN(RDMA_LOG, "%s: endpoint %u: %s completion failed: %s", ep->ctx->device,
			  ep->slot,
			  kind == RDMA_WR_READ	 ? "READ"
			  : kind == RDMA_WR_SEND ? "SEND"
						 : "RECV",
			  ibv_wc_status_str(wc->status));
	if (kind == RDMA_WR_READ)
		ferry__rdma_read_fail_chunk(ep, index, err);
	ferry__rdma_ep_fail(ep, err);
}

static void dispatch(struct ferry__rdma_ctx *ctx, struct ibv_wc *wc)
{
	uint16_t gen = (uint16_t)(wc->wr_id >> 48);
	uint32_t slot = (uint32_t)(wc->wr_id >> 32) & 0xffff;
	unsigned kind = (unsigned)(wc->wr_id >> 24) & 0xff;
	uint32_t index = (uint32_t)wc->wr_id & 0xffffff;
	struct ferry__rdma_ep *ep;

	if (slot >= ctx->slot_count || !ctx->slots[slot].ep || ctx->slots[slot].gen != gen)
		return; /* a torn-down endpoint's completion */
	ep = ctx->slots[slot].ep;
	if (kind == RDMA_WR_READ && apply_fault(ctx, wc))
		return;
	if (wc->status != IBV_WC_SUCCESS) {
		dispatch_error(ep, kind, index, wc);
		return;
	}
	if (ep->state == RDMA_EP_CONNECTING) {
		/* librdmacm completes our side of the handshake inside rdma_get_cm_event(), before
		 * the peer can send: the ESTABLISHED event must be waiting. */
		drain_cm(ctx);
		if (ctx->slots[slot].ep != ep || ctx->slots[slot].gen != gen)
			return;
		if (ep->state != RDMA_EP_ESTABLISHED) {
			ferry__rdma_ep_fail(ep, -EPROTO);
			return;
		}
	} else if (ep->state == RDMA_EP_ACCEPTING) {
		/* The acceptor's QP is ready before its ESTABLISHED event: data may come first. */
		ferry__rdma_ep_established(ep);
		if (ctx->slots[slot].ep != ep || ctx->slots[slot].gen != gen)
			return; /* closed or destroyed by on_connect */
	}
	if (kind == RDMA_WR_RECV)
		ferry__rdma_on_recv(ep, index, wc);
	else if (kind == RDMA_WR_SEND)
		ferry__rdma_on_send(ep, index);
	else
		ferry__rdma_on_read(ep, index);
}

int ferry__rdma_poll_cq(struct ferry__rdma_ctx *ctx)
{
	struct ibv_wc wc[POLL_BATCH];
	int n, total = 0;

	do {
		n = ibv_poll_cq(ctx->cq, POLL_BATCH, wc);
		if (n < 0) {
			FLOG_ERROR(RDMA_LOG, "%s: ibv_poll_cq failed", ctx->device);
			return -EIO;
		}
		for (int i = 0; i < n; i++)
			dispatch(ctx, &wc[i]);
		total += n;
	} while (n == POLL_BATCH);
	/* Empty: whatever torn-down QPs left in the CQ is gone. */
	ctx->cq_stale = 0;
	return total;
}

/* Arm the completion event, then poll: what came before the arm is not lost. */
static int arm_and_poll(struct ferry__rdma_ctx *ctx)
{
	if (ibv_req_notify_cq(ctx->cq, 0)) {
		FLOG_ERROR(RDMA_LOG, "%s: ibv_req_notify_cq failed", ctx->device);
		return -EIO;
	}
	ctx->cq_armed = true;
	return ferry__rdma_poll_cq(ctx);
}

/* Phase 2: completions. Arm before the final poll so nothing slips between them. */
static int drain_cq(struct ferry__rdma_ctx *ctx)
{
	struct ibv_cq *cq;
	void *cq_ctx;
	int n, more;

	while (ibv_get_cq_event(ctx->comp, &cq, &cq_ctx) == 0) {
		ctx->cq_events_unacked++;
		ctx->cq_armed = false;
	}
	if (ctx->cq_events_unacked >= 64) {
		ibv_ack_cq_events(ctx->cq, ctx->cq_events_unacked);
		ctx->cq_events_unacked = 0;
	}
	n = ferry__rdma_poll_cq(ctx);
	if (n < 0 || ctx->cq_armed || ctx->caller_arms || (ctx->busy_poll && ctx->outstanding))
		return n;
	more = arm_and_poll(ctx);
	return more < 0 ? more : n + more;
}

int ferry__rdma_poll(struct ferry__rdma_ctx *ctx, bool arm)
{
	int n, more = 0;

	ferry__rdma_enter(ctx);
	n = ferry__rdma_poll_cq(ctx);
	if (n >= 0 && arm && !ctx->cq_armed)
		more = arm_and_poll(ctx);
	ferry__rdma_leave(ctx);
	return n < 0 ? n : more < 0 ? more : n + more;
}

static void expire_ep(struct ferry__rdma_ep *ep, uint64_t now)
{
	if (ep->state == RDMA_EP_CLOSED)
		return;
	if (ep->state != RDMA_EP_ESTABLISHED) {
		if (ep->deadline_ns && now >= ep->deadline_ns) {
			FLOG_WARN(RDMA_LOG, "%s: endpoint %u: connection not established in time",
				  ep->ctx->device, ep->slot);
			ferry__rdma_ep_fail(ep, -ETIMEDOUT);
		}
		return;
	}
	ferry__rdma_expire_reads(ep, now);
}

/* Phase 3: deadlines, when the earliest has passed; recomputes the earliest. */
static void run_deadlines(struct ferry__rdma_ctx *ctx)
{
	uint64_t now = ferry__now_ns(), next = 0;

	if (!ctx->next_deadline_ns || now < ctx->next_deadline_ns)
		return;
	for (uint32_t i = 0; i < ctx->slot_count; i++) {
		struct ferry__rdma_ep *ep = ctx->slots[i].ep;
		uint64_t d;

		if (!ep)
			continue;
		expire_ep(ep, now);
		ep = ctx->slots[i].ep; /* a callback may have destroyed it */
		if (!ep || ep->state == RDMA_EP_CLOSED)
			continue;
		d = ep->state == RDMA_EP_ESTABLISHED ? ferry__rdma_first_read_deadline(ep)
						     : ep->deadline_ns;
		if (d && (!next || d < next))
			next = d;
	}
	ctx->next_deadline_ns = next;
}

/* Phase 4: callbacks of endpoints torn down. */
static int run_closing(struct ferry__rdma_ctx *ctx)
{
	int n = 0;

	while (!ferry__rdma_list_empty(&ctx->closing)) {
		struct ferry__rdma_ep *ep =
			FERRY_CONTAINER_OF(ctx->closing.next, struct ferry__rdma_ep, link);

		ferry__rdma_list_del(&ep->link);
		ep->flags &= ~RDMA_EP_CLOSING;
		ferry__rdma_ep_finish_close(ep);
		n++;
	}
	return n;
}

int ferry__rdma_progress(struct ferry__rdma_ctx *ctx)
{
	int n, total = 0, err = 0;

	ferry__rdma_enter(ctx);
	n = drain_cm(ctx);
	if (n < 0)
		err = n;
	else
		total += n;
	n = drain_cq(ctx);
	if (n < 0 && !err)
		err = n;
	else if (n > 0)
		total += n;
	run_deadlines(ctx);
	total += run_closing(ctx);
	ferry__rdma_leave(ctx);
	return err ? err : total;
}
