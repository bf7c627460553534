/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RDMA engine, part three: data on an established endpoint. Control messages are SEND WITH
 * IMMEDIATE from a registered slab into pre-posted receive buffers, the immediate data carrying
 * returned credits; READs are split into chunks posted with a per-read depth and a per-endpoint
 * budget. See the DESIGN block in rdma.c for the credit rules.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/util.h"
#include "transport/rdma_int.h"

#define IMM_CREDIT_ONLY 0x80000000u /* a SEND that only returns credits */
#define IMM_CREDITS_MASK 0xffffu
#define DEFAULT_CHUNK_SIZE (1u << 20)
#define DEFAULT_DEPTH 4
#define POST_BATCH 16

int ferry__rdma_ep_io_init(struct ferry__rdma_ep *ep)
{
	struct ferry__rdma_ctx *ctx = ep->ctx;
	size_t slab_size, tables;

	ep->recv_depth = ctx->recv_depth;
	ep->send_slots = ctx->recv_depth;
	ep->msg_size = ctx->msg_size;
	ep->max_reads = ctx->max_reads;
	slab_size = (size_t)(ep->recv_depth + ep->send_slots) * ep->msg_size;
	tables = ep->max_reads * sizeof(*ep->chunks) +
		 (ep->max_reads + ep->send_slots) * sizeof(uint32_t);
	ep->chunks = ferry__calloc(1, tables);
	ep->slab = ferry__malloc(slab_size);
	if (!ep->chunks || !ep->slab)
		return -ENOMEM;
	ep->chunk_free = (uint32_t *)(ep->chunks + ep->max_reads);
	ep->send_free = ep->chunk_free + ep->max_reads;
	ep->slab_mr = ibv_reg_mr(ctx->pd, ep->slab, slab_size, IBV_ACCESS_LOCAL_WRITE);
	if (!ep->slab_mr)
		return errno ? -errno : -ENOMEM;
	/* Pop order follows index order: easier to read in traces. */
	for (uint32_t i = 0; i < ep->max_reads; i++)
		ep->chunk_free[i] = ep->max_reads - 1 - i;
	ep->chunk_free_count = ep->max_reads;
	for (uint32_t i = 0; i < ep->send_slots; i++)
		ep->send_free[i] = ep->send_slots - 1 - i;
	ep->send_free_count = ep->send_slots;
	return 0;
}

void ferry__rdma_ep_io_fini(struct ferry__rdma_ep *ep)
{
	if (ep->slab_mr)
		ibv_dereg_mr(ep->slab_mr);
	ferry__free(ep->slab);
	ferry__free(ep->chunks);
	ep->slab_mr = NULL;
	ep->slab = NULL;
	ep->chunks = NULL;
}

static unsigned char *recv_buf(const struct ferry__rdma_ep *ep, uint32_t index)
{
	return ep->slab + (size_t)index * ep->msg_size;
}

static unsigned char *send_buf(const struct ferry__rdma_ep *ep, uint32_t slot)
{
	return ep->slab + (size_t)(ep->recv_depth + slot) * ep->msg_size;
}

static void fill_recv(const struct ferry__rdma_ep *ep, uint32_t index, struct ibv_recv_wr *wr,
		      struct ibv_sge *sge)
{
	sge->addr = (uint64_t)(uintptr_t)recv_buf(ep, index);
	sge->length = ep->msg_size;
	sge->lkey = ep->slab_mr->lkey;
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = ferry__rdma_wr_id(ep->gen, ep->slot, RDMA_WR_RECV, index);
	wr->sg_list = sge;
	wr->num_sge = 1;
}

int ferry__rdma_post_recvs(struct ferry__rdma_ep *ep)
{
	struct ibv_recv_wr wr[POST_BATCH], *bad;
	struct ibv_sge sge[POST_BATCH];

	for (uint32_t first = 0; first < ep->recv_depth; first += POST_BATCH) {
		uint32_t n = FERRY_MIN(ep->recv_depth - first, POST_BATCH);
		int err;

		for (uint32_t i = 0; i < n; i++) {
			fill_recv(ep, first + i, &wr[i], &sge[i]);
			wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		}
		err = ibv_post_recv(ep->id->qp, wr, &bad);
		if (err)
			return -err;
	}
	return 0;
}

static int repost_recv(struct ferry__rdma_ep *ep, uint32_t index)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;

	fill_recv(ep, index, &wr, &sge);
	return -ibv_post_recv(ep->id->qp, &wr, &bad);
}

size_t ferry__rdma_ep_max_msg(const struct ferry__rdma_ep *ep)
{
	if (!(ep->flags & RDMA_EP_WAS_UP))
		return 0;
	return FERRY_MIN(ep->msg_size, ep->peer.msg_size);
}

/* One SEND WITH IMM from a free slot; returns owed credits with it. */
static int post_send(struct ferry__rdma_ep *ep, const void *buf, size_t len, uint32_t flags)
{
	uint32_t slot = ep->send_free[--ep->send_free_count];
	unsigned char *dst = send_buf(ep, slot);
	struct ibv_sge sge = {(uint64_t)(uintptr_t)dst, (uint32_t)len, ep->slab_mr->lkey};
	struct ibv_send_wr wr = {
		.wr_id = ferry__rdma_wr_id(ep->gen, ep->slot, RDMA_WR_SEND, slot),
		.sg_list = &sge,
		.num_sge = len ? 1 : 0,
		.opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(flags | (ep->credits_owed & IMM_CREDITS_MASK)),
	};
	struct ibv_send_wr *bad;
	int err;

	if (len)
		memcpy(dst, buf, len);
	err = ibv_post_send(ep->id->qp, &wr, &bad);
	if (err) {
		ep->send_free[ep->send_free_count++] = slot;
		FLOG_ERROR(RDMA_LOG, "%s: endpoint %u: posting a SEND failed: %s", ep->ctx->device,
			   ep->slot, ferry_strerror(err));
		ferry__rdma_ep_fail(ep, -err);
		return -err;
	}
	ep->credits--;
	ep->credits_owed = 0;
	ep->sends_in_flight++;
	ep->ctx->outstanding++;
	return 0;
}

/* Data needs two credits: the last one is kept for returning credits (see DESIGN). */
static bool can_send_data(const struct ferry__rdma_ep *ep)
{
	return ep->credits >= 2 && ep->send_free_count;
}

static void pump_sends(struct ferry__rdma_ep *ep)
{
	while (ep->state == RDMA_EP_ESTABLISHED && !ferry__rdma_list_empty(&ep->sendq) &&
	       can_send_data(ep)) {
		struct ferry__rdma_queued_msg *m =
			FERRY_CONTAINER_OF(ep->sendq.next, struct ferry__rdma_queued_msg, link);
		int err;

		ferry__rdma_list_del(&m->link);
		err = post_send(ep, m->data, m->len, 0);
		ferry__free(m);
		if (err)
			return;
	}
	if (ep->state == RDMA_EP_ESTABLISHED && ep->credits_owed >= ep->recv_depth / 2 &&
	    ep->credits >= 1 && ep->send_free_count)
		post_send(ep, NULL, 0, IMM_CREDIT_ONLY);
}

int ferry__rdma_send(struct ferry__rdma_ep *ep, const void *buf, size_t len)
{
	struct ferry__rdma_queued_msg *m;

	if (!ep || ep->state != RDMA_EP_ESTABLISHED)
		return -ENOTCONN;
	if (len > ferry__rdma_ep_max_msg(ep)) {
		FLOG_ERROR(RDMA_LOG, "send: %zu bytes is over the %zu-byte message limit", len,
			   ferry__rdma_ep_max_msg(ep));
		return -EMSGSIZE;
	}
	if (len && !buf) {
		FLOG_ERROR(RDMA_LOG, "send: NULL buffer for %zu bytes", len);
		return -EINVAL;
	}
	if (ferry__rdma_list_empty(&ep->sendq) && can_send_data(ep))
		return post_send(ep, buf, len, 0);
	m = ferry__malloc(sizeof(*m) + len);
	if (!m)
		return -ENOMEM;
	m->len = len;
	if (len)
		memcpy(m->data, buf, len);
	ferry__rdma_list_add_tail(&ep->sendq, &m->link);
	return 0;
}

void ferry__rdma_drop_sendq(struct ferry__rdma_ep *ep)
{
	while (!ferry__rdma_list_empty(&ep->sendq)) {
		struct ferry__rdma_queued_msg *m =
			FERRY_CONTAINER_OF(ep->sendq.next, struct ferry__rdma_queued_msg, link);

		ferry__rdma_list_del(&m->link);
		ferry__free(m);
	}
}

void ferry__rdma_on_recv(struct ferry__rdma_ep *ep, uint32_t index, const struct ibv_wc *wc)
{
	uint32_t imm, credits;
	int err;

	if (!(wc->wc_flags & IBV_WC_WITH_IMM)) {
		FLOG_ERROR(RDMA_LOG, "%s: endpoint %u: a message without credits", ep->ctx->device,
			   ep->slot);
		ferry__rdma_ep_fail(ep, -EPROTO);
		return;
	}
	imm = ntohl(wc->imm_data);
	credits = imm & IMM_CREDITS_MASK;
	if (ep->credits + credits > ep->peer.recv_depth) {
		FLOG_ERROR(RDMA_LOG, "%s: endpoint %u: peer returned %u credits, %u outstanding",
			   ep->ctx->device, ep->slot, credits, ep->peer.recv_depth - ep->credits);
		ferry__rdma_ep_fail(ep, -EPROTO);
		return;
	}
	ep->credits += credits;
	if (!(imm & IMM_CREDIT_ONLY) && ep->cbs.on_message)
		ep->cbs.on_message(ep, recv_buf(ep, index), wc->byte_len, ep->arg);
	if (ep->state != RDMA_EP_ESTABLISHED)
		return; /* closed or destroyed from the callback */
	err = repost_recv(ep, index);
	if (err) {
		ferry__rdma_ep_fail(ep, err);
		return;
	}
	ep->credits_owed++;
	pump_sends(ep);
}

void ferry__rdma_on_send(struct ferry__rdma_ep *ep, uint32_t index)
{
	ep->send_free[ep->send_free_count++] = index;
	ep->sends_in_flight--;
	ep->ctx->outstanding--;
	pump_sends(ep);
}

static bool in_region(const struct ferry__rdma_ctx *ctx, const void *p, size_t len)
{
	uintptr_t start = (uintptr_t)ctx->region, addr = (uintptr_t)p;

	return addr >= start && len <= ctx->region_size && addr - start <= ctx->region_size - len;
}

/* Prepare the next chunk of @op as @wr; takes a chunk slot. */
static void prepare_chunk(struct ferry__rdma_ep *ep, struct ferry__rdma_read *op,
			  struct ibv_send_wr *wr, struct ibv_sge *sge)
{
	uint64_t off = op->chunks_posted * op->chunk_size;
	size_t len = (size_t)FERRY_MIN((uint64_t)op->chunk_size, op->len - off);
	uint32_t slot = ep->chunk_free[--ep->chunk_free_count];

	ep->chunks[slot].op = op;
	sge->addr = (uint64_t)(uintptr_t)(op->local + off);
	sge->length = (uint32_t)len;
	sge->lkey = ep->ctx->mr->lkey;
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = ferry__rdma_wr_id(ep->gen, ep->slot, RDMA_WR_READ, slot);
	wr->sg_list = sge;
	wr->num_sge = len ? 1 : 0;
	wr->opcode = IBV_WR_RDMA_READ;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr.rdma.remote_addr = op->remote + off;
	wr->wr.rdma.rkey = op->rkey;
	op->chunks_posted++;
	op->in_flight++;
	ep->reads_in_flight++;
	ep->ctx->outstanding++;
}

static int flush_chunks(struct ferry__rdma_ep *ep, struct ibv_send_wr *wr, int n)
{
	struct ibv_send_wr *bad;
	int err;

	for (int i = 0; i < n; i++)
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	err = ibv_post_send(ep->id->qp, wr, &bad);
	if (err) {
		FLOG_ERROR(RDMA_LOG, "%s: endpoint %u: posting READs failed: %s", ep->ctx->device,
			   ep->slot, ferry_strerror(err));
		ferry__rdma_ep_fail(ep, -err);
		return -err;
	}
	return 0;
}

/* Post chunks of every read with room, oldest first, within each depth and the budget. */
static void post_reads(struct ferry__rdma_ep *ep)
{
	struct ibv_send_wr wr[POST_BATCH];
	struct ibv_sge sge[POST_BATCH];
	struct ferry__rdma_link *l;
	int n = 0;

	for (l = ep->reads.next; l != &ep->reads && ep->chunk_free_count; l = l->next) {
		struct ferry__rdma_read *op = FERRY_CONTAINER_OF(l, struct ferry__rdma_read, link);

		while (op->chunks_posted < op->chunks_total && op->in_flight < op->depth &&
		       ep->chunk_free_count) {
			prepare_chunk(ep, op, &wr[n], &sge[n]);
			if (++n == POST_BATCH) {
				if (flush_chunks(ep, wr, n))
					return;
				n = 0;
			}
		}
	}
	if (n)
		flush_chunks(ep, wr, n);
}

int ferry__rdma_read(struct ferry__rdma_ep *ep, void *local, uint64_t remote_addr, uint32_t rkey,
		     size_t len, size_t chunk_size, unsigned depth, ferry__rdma_read_cb cb,
		     void *arg)
{
	struct ferry__rdma_ctx *ctx;
	struct ferry__rdma_read *op;

	if (!ep || !cb) {
		FLOG_ERROR(RDMA_LOG, "read: endpoint and callback are required");
		return -EINVAL;
	}
	if (ep->state != RDMA_EP_ESTABLISHED)
		return -ENOTCONN;
	ctx = ep->ctx;
	if (!in_region(ctx, local, len) || remote_addr + len < remote_addr) {
		FLOG_ERROR(RDMA_LOG, "read: [%p, +%zu) is outside the registered region [%p, +%zu)",
			   local, len, (void *)ctx->region, ctx->region_size);
		return -EINVAL;
	}
	op = ferry__calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	op->cb = cb;
	op->arg = arg;
	op->local = local;
	op->remote = remote_addr;
	op->rkey = rkey;
	op->len = len;
	op->chunk_size = FERRY_MIN(chunk_size ? chunk_size : DEFAULT_CHUNK_SIZE, ctx->max_chunk);
	op->depth = FERRY_MIN(depth ? depth : DEFAULT_DEPTH, ep->max_reads);
	op->chunks_total = len ? (len + op->chunk_size - 1) / op->chunk_size : 1;
	op->deadline_ns = ferry__now_ns() + (uint64_t)ctx->op_timeout_ms * 1000000u;
	ferry__rdma_list_add_tail(&ep->reads, &op->link);
	ferry__rdma_note_deadline(ctx, op->deadline_ns);
	post_reads(ep); /* a failure closes the endpoint; op then completes in progress */
	return 0;
}

static void finish_read(struct ferry__rdma_read *op, int status)
{
	ferry__rdma_read_cb cb = op->cb;
	void *arg = op->arg;

	ferry__rdma_list_del(&op->link);
	ferry__free(op);
	cb(arg, status);
}

void ferry__rdma_on_read(struct ferry__rdma_ep *ep, uint32_t index)
{
	struct ferry__rdma_read *op = ep->chunks[index].op;

	ep->chunks[index].op = NULL;
	ep->chunk_free[ep->chunk_free_count++] = index;
	op->in_flight--;
	op->chunks_done++;
	ep->reads_in_flight--;
	ep->ctx->outstanding--;
	/* Refill the pipeline before the callback, which may take a while. */
	post_reads(ep);
	if (op->chunks_done == op->chunks_total)
		finish_read(op, 0);
}

void ferry__rdma_read_fail_chunk(struct ferry__rdma_ep *ep, uint32_t index, int err)
{
	struct ferry__rdma_read *op = ep->chunks[index].op;

	if (op && !op->status)
		op->status = err;
}

void ferry__rdma_complete_reads(struct ferry__rdma_ep *ep, int reason, bool override)
{
	/* One at a time from the head: a callback may destroy the endpoint, which drains the
	 * rest itself. */
	while (!ferry__rdma_list_empty(&ep->reads)) {
		struct ferry__rdma_read *op =
			FERRY_CONTAINER_OF(ep->reads.next, struct ferry__rdma_read, link);

		finish_read(op, !override && op->status ? op->status : reason);
	}
}

uint64_t ferry__rdma_first_read_deadline(const struct ferry__rdma_ep *ep)
{
	if (ferry__rdma_list_empty(&ep->reads))
		return 0;
	return FERRY_CONTAINER_OF(ep->reads.next, struct ferry__rdma_read, link)->deadline_ns;
}

/*
 * Deadlines: reads are in submission order with one timeout, and are posted in that order, so
 * the head expires first and has chunks in flight. Posted READs cannot be recalled: the
 * endpoint goes down; reads past their deadline get -ETIMEDOUT, the others -ECONNRESET.
 */
void ferry__rdma_expire_reads(struct ferry__rdma_ep *ep, uint64_t now_ns)
{
	struct ferry__rdma_link *l;
	int expired = 0;

	if (ep->state != RDMA_EP_ESTABLISHED)
		return;
	for (l = ep->reads.next; l != &ep->reads; l = l->next) {
		struct ferry__rdma_read *op = FERRY_CONTAINER_OF(l, struct ferry__rdma_read, link);

		if (op->deadline_ns > now_ns)
			break;
		if (!op->status)
			op->status = -ETIMEDOUT;
		expired++;
	}
	if (!expired)
		return;
	FLOG_WARN(RDMA_LOG, "%s: endpoint %u: %d READ(s) passed their deadline; resetting",
		  ep->ctx->device, ep->slot, expired);
	ferry__rdma_ep_fail(ep, -ETIMEDOUT);
}
