/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal to the object manager's RDMA side (objmgr_rdma.c: pulling on the loop; objmgr_rdma_pull.c: a
 * pull thread's side; objmgr_rdma_life.c: driving the
 * engine, life cycle; objmgr_rdma_serve.c: answering other nodes' pulls). The DESIGN is at the top of
 * objmgr_rdma.c. Everything here runs on the object manager's loop thread.
 */
#ifndef FERRY_TRANSPORT_OBJMGR_RDMA_INT_H
#define FERRY_TRANSPORT_OBJMGR_RDMA_INT_H

#include "transport/objmgr_int.h"
#include "transport/objmgr_peer.h"
#include "transport/rdma.h"

/* A control message: a whole small object plus its reply fits. */
#define MSG_SIZE (72u << 10)
/* Data + metadata bytes a reply carries inline; larger objects are READ. */
#define INLINE_MAX FERRY__OBJMGR_RDMA_INLINE_MAX
/* Pins one puller endpoint may hold at once. */
#define MAX_PINS 4096
/* Endpoints (QPs) per peer; objects from SPLIT_MIN bytes on are READ over all of them. */
#define MAX_QPS 8
#define SPLIT_MIN (4u << 20)

enum rstep {
	STEP_PROBE, /* PullRequest: the reply, inline data or (addr, rkey) */
	STEP_READ,  /* READ [roff, +len) into dst */
	STEP_DONE,  /* send PullDone (release the server's pin) */
};

/* One step of a pull, on the pull thread's stack, run on the loop. */
struct rfetch {
	struct ferry__objmgr *om;  /* owner */
	enum rstep step;	   /* what to do */
	struct ferry_object_id id; /* the object */
	char ip[48];		   /* the server */
	uint16_t port;		   /* its RDMA port */
	unsigned qp;		   /* which of its endpoints */
	uint64_t xfer;		   /* PROBE: ours; READ/DONE: the pin's */
	uint64_t gen;		   /* PROBE: its endpoint's; READ (qp 0)/DONE: must match */
	uint8_t *dst;		   /* READ: where */
	uint64_t raddr;		   /* READ: remote address */
	uint64_t alloc;		   /* PROBE: the reply's placement id (0: none named) */
	uint32_t rkey;		   /* READ: remote key */
	uint64_t len;		   /* READ: bytes */
	struct ferry__objmgr_step
		base;	 /* its peer, deadline; started: request sent / READ posted */
	bool reading;	 /* a READ callback is owed */
	int fail_status; /* reading: the status to report at the callback */
	/* PROBE results (heap; the pull thread frees them). */
	uint64_t data_size;		/* the object's size */
	uint8_t *metadata;		/* its metadata */
	uint32_t metadata_size;		/* bytes */
	uint8_t *data;			/* inline: the whole data */
	bool inline_all;		/* data holds every byte */
	struct ferry__objmgr_handoff h; /* result; the pull thread's wait for it */
	/* The fast path's probe (heap, no pull thread): called at its end instead of h. */
	void (*on_done)(struct rfetch *f, int status);
	struct ferry__objmgr_pull *owner; /* on_done's pull */
};

/* An endpoint to another node's RDMA port (in r->peers). */
struct rpeer {
	struct ferry__objmgr_peer base; /* key "ip:port#qp", the steps on it */
	struct ferry__rdma_ep *ep;	/* NULL once gone */
	uint64_t gen;			/* tells a reconnected endpoint from the one that pinned */
	uint64_t next_xfer;		/* ids of our requests */
};

/* A pin held for a puller until its PullDone. */
struct rpin {
	uint64_t xfer;		       /* the puller's id */
	uint64_t expires_ms;	       /* released then at the latest */
	struct ferry_plasma_view view; /* the pinned object */
	struct rpin *next;	       /* list */
};

/* A puller's endpoint, accepted by our listener. */
struct rserve {
	struct ferry__objmgr_rdma *r; /* owner */
	struct ferry__rdma_ep *ep;    /* the endpoint */
	struct rpin *pins;	      /* held for it */
	unsigned npins;		      /* in the list */
	struct rserve *next;	      /* r->served */
};

struct ferry__objmgr_rdma {
	struct ferry__objmgr *om;	       /* owner */
	struct ferry__rdma_ctx *ctx;	       /* device, PD, CQ, the arena's MR */
	struct ferry__rdma_listener *listener; /* pullers connect here */
	struct ferry__loop_req cm_poll;	       /* rdma_cm event fd */
	struct ferry__loop_req cq_poll;	       /* completion channel fd */
	struct ferry__loop_timer tick;	       /* engine deadlines */
	struct ferry__loop_timer sweep;	       /* pin deadlines */
	bool driving;			       /* inside drive() */
	bool again;			       /* drive once more */
	bool shut;			       /* shutdown began */
	bool cq_failing;		       /* the spin poll's CQ error is logged */
	struct ferry__objmgr_peer_set peers;   /* outgoing endpoints */
	struct rserve *served;		       /* accepted endpoints */
	uint64_t next_gen;		       /* of the next rpeer */
	struct ferry__fb_builder fb;	       /* loop thread's messages */
};

/* Send the message just built in @b, with the object manager's prefix, as one control
 * message. */
int ferry__objmgr_rdma_send_built(struct ferry__rdma_ep *ep, struct ferry__fb_builder *b,
				  uint16_t type);

/* objmgr_rdma.c, on the loop: the peer set's RDMA parts; start a step (a posted one:
 * @arg is the rfetch); send PullDone{@xfer} on the endpoint that pinned (@gen); count an early
 * copy kept or thrown away; whether a reply fits the copy made from @sizes; create the copy
 * from the directory's sizes (@on_loop: from the client's chunk, never waiting). */
extern const struct ferry__objmgr_peer_ops ferry__objmgr_rdma_peer_ops;
void ferry__objmgr_rdma_fetch_start(void *arg, int status);
void ferry__objmgr_rdma_done_on_pin(struct ferry__objmgr_rdma *r, const char *ip, uint16_t port,
				    uint64_t gen, uint64_t xfer);
void ferry__objmgr_rdma_count_early(struct ferry__objmgr *om, bool kept);
bool ferry__objmgr_rdma_reply_fits(const struct rfetch *f, int status,
				   const struct ferry__objmgr_sizes *sizes);
int ferry__objmgr_rdma_create_early(struct ferry__objmgr *om, const struct ferry_object_id *id,
				    const struct ferry__objmgr_sizes *sizes, bool on_loop,
				    void **dst);

/* objmgr_rdma_life.c: run the engine until nothing is due ("drive()" in the DESIGN; from
 * inside its callbacks only asks for one more round); poll the CQ once (the loop's spin
 * poller; arms its event when @sleeping). */
void ferry__objmgr_rdma_drive(struct ferry__objmgr_rdma *r);
int ferry__objmgr_rdma_engine_poll(void *arg, bool sleeping);

/* objmgr_rdma_serve.c: the listener's callbacks; free an accepted endpoint and its pins; the
 * timer that releases pins past their deadline. */
extern const struct ferry__rdma_ep_cbs ferry__objmgr_rdma_serve_cbs;
void ferry__objmgr_rdma_serve_free(struct rserve *s);
void ferry__objmgr_rdma_sweep_pins(struct ferry__loop_timer *t, int status);

#endif
