/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the RDMA engine shared by rdma.c (context, progress, completion dispatch),
 * rdma_conn.c (rdma_cm: listen, connect, handshake, teardown) and rdma_io.c (messages, READs).
 * See the DESIGN block in rdma.c.
 */
#ifndef FERRY_TRANSPORT_RDMA_INT_H
#define FERRY_TRANSPORT_RDMA_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "transport/rdma.h"
#include "transport/rdma_hs.h"

#define RDMA_LOG "rdma"

/* An intrusive circular doubly-linked list; a head is a link pointing at itself when empty. */
struct ferry__rdma_link {
	struct ferry__rdma_link *prev; /* previous element, or the head */
	struct ferry__rdma_link *next; /* next element, or the head */
};

static inline void ferry__rdma_list_init(struct ferry__rdma_link *head)
{
	head->prev = head->next = head;
}

static inline bool ferry__rdma_list_empty(const struct ferry__rdma_link *head)
{
	return head->next == head;
}

static inline void ferry__rdma_list_add_tail(struct ferry__rdma_link *head,
					     struct ferry__rdma_link *l)
{
	l->prev = head->prev;
	l->next = head;
	head->prev->next = l;
	head->prev = l;
}

static inline void ferry__rdma_list_del(struct ferry__rdma_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->prev = l->next = l;
}

/* What an rdma_cm id's context points at: the first member of each owner. */
enum ferry__rdma_owner {
	RDMA_OWNER_CTX = 1,	 /* the context's device id */
	RDMA_OWNER_LISTENER = 2, /* a listening id */
	RDMA_OWNER_EP = 3,	 /* an endpoint's id */
};

/*
 * Work request ids: [63..48] generation, [47..32] endpoint slot, [31..24] kind,
 * [23..0] index (receive buffer, send slot or READ chunk slot). A completion whose slot
 * generation moved on belongs to a torn-down endpoint and is dropped.
 */
enum ferry__rdma_wr_kind {
	RDMA_WR_RECV = 1, /* index: receive buffer */
	RDMA_WR_SEND = 2, /* index: send slot */
	RDMA_WR_READ = 3, /* index: chunk slot */
};

static inline uint64_t ferry__rdma_wr_id(uint16_t gen, uint32_t slot, unsigned kind, uint32_t index)
{
	return (uint64_t)gen << 48 | (uint64_t)(slot & 0xffff) << 32 |
	       (uint64_t)(kind & 0xff) << 24 | (index & 0xffffff);
}

enum ferry__rdma_ep_state {
	RDMA_EP_RESOLVING_ADDR = 1,  /* connect: waiting for ADDR_RESOLVED */
	RDMA_EP_RESOLVING_ROUTE = 2, /* connect: waiting for ROUTE_RESOLVED */
	RDMA_EP_CONNECTING = 3,	     /* connect: request sent, waiting for ESTABLISHED */
	RDMA_EP_ACCEPTING = 4,	     /* accept: reply sent, waiting for ESTABLISHED */
	RDMA_EP_ESTABLISHED = 5,     /* messages and READs flow */
	RDMA_EP_CLOSED = 6,	     /* torn down: QP gone; waiting for callbacks or destroy */
};

#define RDMA_EP_REPORTED 0x1  /* the user holds the handle (connect, or accept reported) */
#define RDMA_EP_WAS_UP 0x2    /* reached ESTABLISHED: a failure is on_close, not on_connect */
#define RDMA_EP_CLOSING 0x4   /* on ctx->closing: its failure callbacks are due */
#define RDMA_EP_DESTROYED 0x8 /* ferry__rdma_ep_destroy() ran; memory freed at depth 0 */

/* One READ chunk in flight: the read it belongs to (completions count, not measure). */
struct ferry__rdma_chunk {
	struct ferry__rdma_read *op; /* owner; NULL when the slot is free */
};

/* A READ operation (one ferry__rdma_read() call). */
struct ferry__rdma_read {
	struct ferry__rdma_link link; /* in ep->reads, submission order */
	ferry__rdma_read_cb cb;	      /* completion */
	void *arg;		      /* for cb */
	char *local;		      /* destination inside the context's region */
	uint64_t remote;	      /* source address in the peer's region */
	uint32_t rkey;		      /* the peer's region key */
	size_t len;		      /* bytes in all */
	size_t chunk_size;	      /* bytes per READ work request */
	uint32_t depth;		      /* chunks of this read allowed in flight */
	uint32_t in_flight;	      /* chunks posted, not completed */
	uint64_t chunks_total;	      /* ceil(len / chunk_size), 1 when len is 0 */
	uint64_t chunks_posted;	      /* chunks handed to the QP */
	uint64_t chunks_done;	      /* chunks completed successfully */
	uint64_t deadline_ns;	      /* monotonic; the op fails with -ETIMEDOUT after it */
	int status;		      /* first error seen for this op, or 0 */
};

/* A message waiting for a credit or a send slot. */
struct ferry__rdma_queued_msg {
	struct ferry__rdma_link link; /* in ep->sendq */
	size_t len;		      /* payload bytes following this header */
	unsigned char data[];	      /* payload */
};

struct ferry__rdma_ep {
	enum ferry__rdma_owner owner;	       /* RDMA_OWNER_EP: must stay first */
	struct ferry__rdma_ctx *ctx;	       /* owner context */
	struct rdma_cm_id *id;		       /* connection id (owns the QP while it exists) */
	struct ferry__rdma_listener *listener; /* accepting and not yet reported, else NULL */
	struct ferry__rdma_ep_cbs cbs;	       /* the user's callbacks */
	void *arg;			       /* passed to cbs */
	enum ferry__rdma_ep_state state;       /* see enum */
	unsigned flags;			       /* RDMA_EP_* */
	int close_reason;		       /* first error that closed it */
	uint32_t slot;			       /* index in ctx->slots */
	uint16_t gen;			       /* generation tagged into this endpoint's wr_ids */
	uint64_t deadline_ns;		       /* connect/accept deadline (monotonic) */
	struct ferry__rdma_link link;	       /* in ctx->closing or ctx->graveyard */
	uint32_t cq_entries;		       /* completion queue entries reserved for this QP */
	/* Control messages: one registered slab, recv_depth receive buffers then send slots. */
	unsigned char *slab;	/* (recv_depth + send_slots) * msg_size bytes */
	struct ibv_mr *slab_mr; /* its registration (local write only) */
	uint32_t recv_depth;	/* receive buffers we post */
	uint32_t send_slots;	/* send buffers */
	uint32_t msg_size;	/* bytes per buffer */
	/* What the peer said in the handshake: the receive buffers it posts and their size, and
	 * (a connector's only, from the welcome) its region; 0: none. */
	struct ferry__rdma_terms peer;
	uint32_t *send_free;	       /* stack of free send slots */
	uint32_t send_free_count;      /* entries in send_free */
	uint32_t credits;	       /* sends the peer can take now */
	uint32_t credits_owed;	       /* our reposted receives not yet reported */
	uint32_t sends_in_flight;      /* SENDs posted, not completed */
	struct ferry__rdma_link sendq; /* ferry__rdma_queued_msg waiting, FIFO */
	/* READs. */
	struct ferry__rdma_link reads;	  /* every unfinished ferry__rdma_read, FIFO */
	struct ferry__rdma_chunk *chunks; /* max_reads chunk slots */
	uint32_t *chunk_free;		  /* stack of free chunk slots */
	uint32_t chunk_free_count;	  /* entries in chunk_free */
	uint32_t max_reads;		  /* chunk slots */
	uint32_t reads_in_flight;	  /* READ work requests posted, not completed */
};

struct ferry__rdma_listener {
	enum ferry__rdma_owner owner;  /* RDMA_OWNER_LISTENER: must stay first */
	struct ferry__rdma_ctx *ctx;   /* owner context */
	struct rdma_cm_id *id;	       /* listening id */
	struct ferry__rdma_ep_cbs cbs; /* given to accepted endpoints */
	void *arg;		       /* given to accepted endpoints */
	uint16_t port;		       /* bound port, host order */
	struct ferry__rdma_link link;  /* in ctx->listeners */
};

/* An endpoint slot: completions find their endpoint through it. */
struct ferry__rdma_slot {
	struct ferry__rdma_ep *ep; /* NULL when free */
	uint16_t gen;		   /* bumped at teardown: older wr_ids no longer match */
};

struct ferry__rdma_ctx {
	enum ferry__rdma_owner owner;	      /* RDMA_OWNER_CTX: must stay first */
	struct rdma_event_channel *channel;   /* all of this context's rdma_cm ids report here */
	struct rdma_cm_id *dev_id;	      /* bound/resolved to opts.ip: keeps the device open */
	struct ibv_context *verbs;	      /* the device (librdmacm's, borrowed) */
	struct ibv_pd *pd;		      /* protection domain of everything below */
	struct ibv_comp_channel *comp;	      /* CQ event fd */
	struct ibv_cq *cq;		      /* one CQ for every QP's sends and receives */
	struct ibv_mr *mr;		      /* the arena */
	char *region;			      /* arena start */
	size_t region_size;		      /* arena length */
	uint32_t cq_size;		      /* entries the CQ holds */
	uint32_t cq_reserved;		      /* entries reserved by live QPs */
	uint32_t cq_stale;		      /* entries torn-down QPs may still occupy */
	bool cq_armed;			      /* a completion event is requested */
	unsigned cq_events_unacked;	      /* events got, not yet acked */
	struct ferry__rdma_slot *slots;	      /* endpoint table */
	uint32_t slot_count;		      /* entries in slots */
	struct ferry__rdma_link listeners;    /* ferry__rdma_listener */
	struct ferry__rdma_link closing;      /* endpoints whose failure callbacks are due */
	struct ferry__rdma_link graveyard;    /* destroyed endpoints to free at depth 0 */
	unsigned depth;			      /* nesting of callback-running entry points */
	uint64_t next_deadline_ns;	      /* earliest deadline (may be early), 0 = none */
	uint32_t outstanding;		      /* WRs posted, not completed (busy poll) */
	uint32_t recv_depth;		      /* options, defaults applied */
	uint32_t msg_size;		      /* " */
	uint32_t max_reads;		      /* " */
	uint32_t connect_timeout_ms;	      /* " */
	uint32_t op_timeout_ms;		      /* " */
	bool busy_poll;			      /* " */
	bool caller_arms;		      /* " */
	uint32_t max_chunk;		      /* port: largest message (READ chunk) */
	uint8_t max_rd_atom;		      /* device: READs we answer at once per QP */
	uint8_t max_init_rd_atom;	      /* device: READs we issue at once per QP */
	uint8_t token_len;		      /* bytes in token, or 0xff for a digest */
	uint8_t token[FERRY__RDMA_TOKEN_MAX]; /* token (or digest) as sent */
	enum ferry__rdma_fault fault;	      /* armed test fault */
	unsigned fault_countdown;	      /* READ completions to let pass first */
	char device[64];		      /* device name */
};

/* rdma.c */
int ferry__rdma_parse_addr(const char *ip, uint16_t port, struct sockaddr_storage *ss);
void ferry__rdma_enter(struct ferry__rdma_ctx *ctx);
void ferry__rdma_leave(struct ferry__rdma_ctx *ctx);
int ferry__rdma_slot_add(struct ferry__rdma_ctx *ctx, struct ferry__rdma_ep *ep);
int ferry__rdma_cq_reserve(struct ferry__rdma_ctx *ctx, uint32_t entries);
void ferry__rdma_note_deadline(struct ferry__rdma_ctx *ctx, uint64_t deadline_ns);
int ferry__rdma_wc_errno(enum ibv_wc_status status);
int ferry__rdma_poll_cq(struct ferry__rdma_ctx *ctx);

/* rdma_conn.c */
int ferry__rdma_handle_cm_event(struct ferry__rdma_ctx *ctx, struct rdma_cm_event *ev);
void ferry__rdma_ep_fail(struct ferry__rdma_ep *ep, int reason);
void ferry__rdma_ep_finish_close(struct ferry__rdma_ep *ep);
void ferry__rdma_ep_established(struct ferry__rdma_ep *ep);
void ferry__rdma_ep_free(struct ferry__rdma_ep *ep);

/* rdma_io.c */
int ferry__rdma_ep_io_init(struct ferry__rdma_ep *ep);
void ferry__rdma_ep_io_fini(struct ferry__rdma_ep *ep);
int ferry__rdma_post_recvs(struct ferry__rdma_ep *ep);
void ferry__rdma_on_recv(struct ferry__rdma_ep *ep, uint32_t index, const struct ibv_wc *wc);
void ferry__rdma_on_send(struct ferry__rdma_ep *ep, uint32_t index);
void ferry__rdma_on_read(struct ferry__rdma_ep *ep, uint32_t index);
void ferry__rdma_read_fail_chunk(struct ferry__rdma_ep *ep, uint32_t index, int err);
void ferry__rdma_complete_reads(struct ferry__rdma_ep *ep, int reason, bool override);
void ferry__rdma_drop_sendq(struct ferry__rdma_ep *ep);
void ferry__rdma_expire_reads(struct ferry__rdma_ep *ep, uint64_t now_ns);
uint64_t ferry__rdma_first_read_deadline(const struct ferry__rdma_ep *ep);

#endif
