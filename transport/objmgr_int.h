/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Object manager internals shared by objmgr.c (pull threads, dedup, node table),
 * objmgr_serve.c (the serving side on the loop) and objmgr_tcp.c (TCP pulls on the loop, with
 * the peer bookkeeping of objmgr_peer.h).
 */
#ifndef FERRY_TRANSPORT_OBJMGR_INT_H
#define FERRY_TRANSPORT_OBJMGR_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <ferry/plasma.h>

#include "common/fb.h"
#include "common/hashmap.h"
#include "common/loop.h"
#include "transport/objmgr.h"
#include "transport/objmgr_peer.h"
#include "transport/shm.h"
#include "transport/tcp.h"

/* Largest data range one PullReply carries, and the room its metadata and framing may take. */
#define FERRY__OBJMGR_MAX_CHUNK (4u << 20)
#define FERRY__OBJMGR_DEFAULT_MAX_QUEUED (8u << 20) /* two inline replies of the largest chunk */
#define FERRY__OBJMGR_DEFAULT_STALL_MS 30000u
#define FERRY__OBJMGR_MAX_METADATA (1u << 20)
#define FERRY__OBJMGR_MAX_MESSAGE (FERRY__OBJMGR_MAX_CHUNK + FERRY__OBJMGR_MAX_METADATA + 4096)
/* Data a first request asks for: objects up to this size take one round trip. */
#define FERRY__OBJMGR_INLINE_BYTES (64u << 10)
/* The arena chunk the object manager asks its store for (the store caps it at arena / 16).
 * Creates up to a quarter of it need no round trip to the store, so the loop itself can
 * create a copy of up to 2 MiB (a 1 MiB object with its metadata) and READ into it while the
 * pin request is out (objmgr_rdma.c). The price is the chunk's: its memory is freed once the
 * last object in it is gone. */
#define FERRY__OBJMGR_STORE_CHUNK (8u << 20)

/* Control messages over every engine are common frames (common/frame.h): this 8-byte header
 * (magic, version, MessageType, length), then the FlatBuffer, which so stays 8-byte aligned. */
#define FERRY__OBJMGR_PREFIX 8

struct ferry__objmgr_tcp_peer;
struct ferry__objmgr_req;

/*
 * A step a pull thread hands to the loop and waits for: TCP fetches, RDMA steps, test hooks.
 * ferry__objmgr_handoff_run() posts @start(step, 0) on the loop for each of @n steps at @steps
 * (@stride bytes apart, each with its handoff @offset bytes in) and sleeps until the loop called
 * ferry__objmgr_handoff_done() on each; after that the loop never touches the step. A step that
 * cannot be posted (stopping, no memory) is not started and gets -ECANCELED. In two halves:
 * _start() posts (returns how many went) and _wait(), with that count, sleeps; the thread may
 * do other work between them, not touching the steps.
 */
struct ferry__objmgr_handoff {
	int status;	     /* the step's result */
	bool done;	     /* the loop is finished with it */
	pthread_cond_t cond; /* signalled at done (om->lock) */
};

void ferry__objmgr_handoff_run(struct ferry__objmgr *om, void *steps, size_t stride, size_t offset,
			       unsigned n, void (*start)(void *step, int status));
unsigned ferry__objmgr_handoff_start(struct ferry__objmgr *om, void *steps, size_t stride,
				     size_t offset, unsigned n,
				     void (*start)(void *step, int status));
void ferry__objmgr_handoff_wait(struct ferry__objmgr *om, void *steps, size_t stride, size_t offset,
				unsigned n, unsigned posted);
void ferry__objmgr_handoff_done(struct ferry__objmgr *om, struct ferry__objmgr_handoff *h,
				int status);

/*
 * One TCP fetch, made by a pull thread, run on the loop. Probe (dst NULL): ask for the first
 * FERRY__OBJMGR_INLINE_BYTES inline and learn the size and metadata. Stream: [next, end) of the
 * object straight into dst + next (ferry__tcp_expect). The pull thread waits on done; the loop
 * never touches the fetch after setting done (under om->lock). An async probe (on_done set,
 * the loop's fast path) has no waiter: the loop calls on_done, which then owns the fetch.
 */
struct ferry__objmgr_fetch {
	struct ferry__objmgr *om;	      /* owner */
	struct ferry_object_id id;	      /* the object */
	char ip[48];			      /* the peer */
	uint16_t port;			      /* its port */
	uint8_t *dst;			      /* stream: the create buffer; probe: NULL */
	uint64_t next;			      /* stream: first offset */
	uint64_t end;			      /* stream: end of the range */
	uint64_t object_size;		      /* stream: the size the probe saw */
	struct ferry__objmgr_step base;	      /* its peer and the attempt's deadline */
	struct ferry__objmgr_req *stream_req; /* stream: its request while expected */
	bool failed;			      /* status decided, waiting for the expect callback */
	/* Probe results (heap, freed by the pull thread). */
	uint64_t data_size;		/* the object's size */
	uint8_t *metadata;		/* its metadata */
	uint32_t metadata_size;		/* bytes */
	uint8_t *first;			/* the first bytes */
	uint64_t first_size;		/* bytes at first */
	struct ferry__objmgr_handoff h; /* result; the pull thread's wait for it */
	/* Set: nobody waits on h.cond; the loop calls it (from a post) once it is done. */
	void (*on_done)(struct ferry__objmgr_fetch *f);
	void *owner; /* on_done's context */
};

/* A TCP engine endpoint to another node's object manager, on the loop (in om->peers). */
struct ferry__objmgr_tcp_peer {
	struct ferry__objmgr_peer base; /* key "ip:port", its fetches */
	struct ferry__tcp_ep *ep;	/* NULL once gone */
	struct ferry__objmgr_req *head; /* requests sent, in order (replies come so) */
	struct ferry__objmgr_req *tail; /* last of them */
	uint64_t next_xfer;		/* xfer id of the next request */
};

/* A request sent: in the reply FIFO until answered and, for a stream, held by its expect
 * until that completes (refs). fetch is NULL once its fetch no longer listens. */
struct ferry__objmgr_req {
	uint64_t xfer;			     /* id on the endpoint */
	uint64_t offset;		     /* range asked for */
	uint64_t len;			     /* its bytes */
	bool stream;			     /* data comes as a transfer */
	unsigned refs;			     /* FIFO + expect */
	struct ferry__objmgr_tcp_peer *peer; /* whose FIFO */
	struct ferry__objmgr_fetch *fetch;   /* whose */
	struct ferry__objmgr_req *next;	     /* FIFO */
};

/* Locations kept per object by the location cache (objmgr_locs.c); more are looked up. */
#define FERRY__OBJMGR_CACHED_LOCATIONS 8

/* A pull in progress, shared by every caller that asked for the object meanwhile. */
struct ferry__objmgr_waiter {
	ferry__objmgr_pull_cb cb;	   /* the caller's */
	void *arg;			   /* its argument */
	struct ferry__objmgr_waiter *next; /* list */
};

/* An object's sizes as the directory has them (a hint: the probe's reply is the truth). */
struct ferry__objmgr_sizes {
	uint64_t data;		      /* data bytes; 0: unknown (then so is metadata) */
	uint32_t metadata;	      /* metadata bytes */
	struct ferry_worker_id owner; /* its owner, which a copy made here keeps; nil: unknown */
};

struct ferry__objmgr_pull {
	struct ferry_object_id id;	      /* the object */
	struct ferry__objmgr_waiter *waiters; /* who to tell */
	uint64_t start_us;		      /* when asked */
	struct ferry__objmgr_pull *next;      /* run queue */
	/* Handed over by the loop's fast path (objmgr_fast.c); zero otherwise. */
	bool fast_tried;		/* it tried fast_node, with fast_status / fast_probe */
	bool fast_abort;		/* it created the copy and could not seal it */
	unsigned fast_transport;	/* FERRY_GCS_TRANSPORT_TCP or _RDMA */
	int fast_status;		/* the attempt's error; 0 with fast_probe;
					 * FERRY__OBJMGR_FAST_RETRY: try fast_node afresh */
	struct ferry_node_id fast_node; /* the location it tried */
	struct ferry__objmgr_fetch *fast_probe; /* its probe's reply, to go on from; or NULL */
	uint32_t ncached;			/* the cached locations it read */
	struct ferry_node_id cached[FERRY__OBJMGR_CACHED_LOCATIONS]; /* them */
	/* Where each lies in its store, as the directory has it (0/0: unknown). */
	struct ferry_gcs_object_place cached_place[FERRY__OBJMGR_CACHED_LOCATIONS];
	struct ferry_gcs_object_place fast_place; /* fast_node's */
	struct ferry__objmgr_sizes sizes; /* the directory's (cache or look-up), once read */
	struct rbig *big; /* a large RDMA pull the loop runs: a pull thread only creates the copy
			   * (objmgr_rdma.c); NULL otherwise */
	/* Waiting for the object to appear (objmgr_wait.c); all under om->lock. */
	uint64_t wait_until_us;		      /* retry until then; 0: one attempt, UINT64_MAX:
						* until ferry__objmgr_pull_unwant() */
	bool parked;			      /* in om->parked until due_us */
	bool woken;			      /* a location event came during an attempt */
	uint64_t due_us;		      /* parked: the next attempt */
	uint32_t backoff_ms;		      /* the last pause */
	unsigned tries;			      /* attempts that found nothing to pull */
	int last_status;		      /* the last attempt's */
	struct ferry__objmgr_pull *park_next; /* om->parked */
};

/* The location cache (objmgr_locs.c): zeroed is off; the first pull starts it. */
struct ferry__objmgr_loc;
struct ferry__objmgr_locs {
	atomic_int state;		  /* off, starting, on */
	pthread_mutex_t lock;		  /* map, list (set up once state left off) */
	pthread_mutex_t follow_lock;	  /* orders (un)subscribe requests; taken before lock */
	pthread_cond_t known_cond;	  /* a snapshot ended, or an entry went */
	struct ferry__hashmap map;	  /* object id -> struct ferry__objmgr_loc * (followed) */
	struct ferry__objmgr_loc *newest; /* LRU list: the most recently used */
	struct ferry__objmgr_loc *oldest; /* LRU list: evicted first */
	atomic_uint_fast64_t events;	  /* location events taken (stats) */
};

struct ferry__objmgr {
	struct ferry__objmgr_opts opts; /* copied; token and ip point into this struct */
	uint8_t token[256];		/* cluster token */
	char ip[48];			/* listen/advertise address */
	char store_socket[FERRY__NODE_ADDR_PATH_MAX]; /* own store */
	char host[40];				      /* boot id */
	uint64_t run;				      /* this start's run id (random) */
	struct ferry_plasma_client *store;	      /* own store (thread-safe) */
	uint64_t store_capacity;		      /* its arena bytes */
	struct ferry__shm_peers shm;		      /* clients of other stores on this host */
	/* Loop thread. */
	struct ferry__loop *loop;   /* TCP server and TCP pulls */
	pthread_t loop_thread;	    /* runs it */
	bool loop_started;	    /* the loop runs our work (own: loop_thread joinable) */
	bool own_loop;		    /* created here (not opts.loop) */
	struct ferry__tcp_ctx *tcp; /* TCP engine: both sides */
	struct ferry__tcp_listener *listener; /* PullRequests from other nodes */
	uint16_t port;			      /* its port */
	struct ferry__objmgr_peer_set peers;  /* outgoing connections */
	struct ferry__objmgr_rdma *rdma;      /* RDMA side (objmgr_rdma.c); NULL: none */
	uint16_t rdma_port;		      /* its listen port */
	struct ferry__fb_builder fb;	      /* encodes requests */
	struct ferry__fb_builder serve_fb;    /* encodes replies */
	bool shut;			      /* loop side stopped: no new fetches */
	/* Pull threads and shared state, under lock. */
	pthread_mutex_t lock;		       /* everything below and fetch->done */
	pthread_cond_t work_cond;	       /* queue not empty or stopping */
	pthread_cond_t admit_cond;	       /* bytes_in_flight went down */
	pthread_cond_t nodes_cond;	       /* node table changed */
	struct ferry__objmgr_puller *pullers;  /* pull thread slots (opts.threads) */
	unsigned nrunning;		       /* pull threads running */
	unsigned nidle;			       /* of those, waiting for work */
	unsigned nqueued;		       /* pulls in queue */
	struct ferry__objmgr_pull *queue;      /* pulls not picked up yet */
	struct ferry__objmgr_pull *queue_tail; /* last */
	struct ferry__hashmap pulls;	       /* object id -> struct ferry__objmgr_pull * */
	struct ferry__hashmap nodes;	       /* node id -> struct ferry__node_addr */
	struct ferry__hashmap node_asks;       /* node id -> u8 asked / dead (objmgr_nodes.c) */
	uint64_t max_in_flight;		       /* admission limit */
	bool stopping;			       /* no new pulls; threads leave */
	bool stopped;			       /* stop() finished */
	struct ferry__objmgr_stats stats;      /* counters */
	struct ferry__objmgr_locs locs;	       /* location cache */
	unsigned fast_pulls;		       /* pulls on the loop's fast path */
	pthread_cond_t fast_cond;	       /* fast_pulls went to 0 */
	struct ferry__loop_timer notices;      /* flushes the seal notices held back (fast path) */
	struct ferry__objmgr_pull *parked;     /* waiting pulls between attempts (objmgr_wait.c) */
	struct ferry__objmgr_event *timeline;  /* the last pulls that ended (a ring of
						* FERRY__OBJMGR_TIMELINE); NULL: none yet */
	uint64_t timeline_ended;	       /* pulls written to it since the start */
};

/* objmgr_serve.c: listen (on the loop, or before it runs). */
int ferry__objmgr_serve_start(struct ferry__objmgr *om);
/* objmgr_serve.c: pin @id in the own store for a peer, on the loop: 0 and *@view, -ENOENT,
 * -EBUSY, ... (through opts.store_server when the store shares the loop, else the client). */
int ferry__objmgr_store_get(struct ferry__objmgr *om, const struct ferry_object_id *id,
			    struct ferry_plasma_view *view);
/*
 * ferry__objmgr_reply_build() - the PullReply to verified PullRequest @req: @status is the
 * store lookup's (0: @view holds the pinned object). Range checks happen here, before any byte
 * of @view is read. *@data_bytes gets the data bytes copied in. Returns the build's result.
 */
int ferry__objmgr_reply_build(struct ferry__fb_builder *b, const void *req,
			      const struct ferry_plasma_view *view, int status,
			      uint64_t *data_bytes);
/* ferry__objmgr_send() - the message in @b (just built) as a control message on @ep, or
 * -errno. ferry__objmgr_unwrap() - the type and FlatBuffer of a received control message (a
 * frame, from either engine): 0, or -EPROTO (a bad header, a length that is not the
 * message's, or a payload that fails verification; logged). */
int ferry__objmgr_send(struct ferry__tcp_ep *ep, struct ferry__fb_builder *b, uint16_t type);
/* ferry__objmgr_wrap() - the message just built in @b as a frame, ready for any engine:
 * its first byte and *@len, or NULL (nothing built). */
void *ferry__objmgr_wrap(struct ferry__fb_builder *b, uint16_t type, size_t *len);
int ferry__objmgr_unwrap(const void *buf, size_t len, uint16_t *type, const void **payload,
			 size_t *payload_len);
/* ferry__objmgr_unwrap_request() - the serving side's decoder, for every engine: unwrap, then
 * ferry__objmgr_request_check(). 0 (a PullRequest or PullDone to act on) or -EPROTO/-EINVAL. */
int ferry__objmgr_unwrap_request(const void *buf, size_t len, uint16_t *type, const void **payload,
				 size_t *payload_len);

/* objmgr_fast.c: start @p (just put in om->pulls, om->lock held, not yet queued) on the loop's
 * fast path when its location is cached and reached over TCP. true: the loop has it (it
 * finishes the pull or queues it); false: the caller queues it as usual. */
bool ferry__objmgr_fast_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p);
/* Data + metadata bytes an RDMA reply carries inline; larger objects are READ. */
#define FERRY__OBJMGR_RDMA_INLINE_MAX (64u << 10)
/* fast_status of a location the fast path could not finish and left untried (an RDMA probe
 * answered with a pin, or an error after which pull_from() tries TCP). */
#define FERRY__OBJMGR_FAST_RETRY 1
/* objmgr_fast.c: an RDMA fast-path probe of @p ended (on the loop) with @status (0: the whole
 * object inline in @data/@metadata; FERRY__OBJMGR_FAST_RETRY; or the attempt's error): finish
 * the pull there or hand it to a pull thread. The caller frees the buffers after. */
void ferry__objmgr_fast_probed(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status,
			       const uint8_t *data, uint64_t data_size, const uint8_t *metadata,
			       uint32_t metadata_size);
/* objmgr_fast.c: the loop READ the whole object into @p's copy, which a pull thread created
 * (@status 0: seal it there and finish, @bytes of data + metadata), or the attempt ended with
 * @status (FERRY__OBJMGR_FAST_RETRY, or its error): hand it to a pull thread, which first aborts
 * the copy if @created. Admission is already given back. */
void ferry__objmgr_fast_filled(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status,
			       bool created, uint64_t bytes);
/* objmgr_fast.c: free a heap probe and its results (NULL: nothing). */
void ferry__objmgr_probe_free(struct ferry__objmgr_fetch *f);
/* objmgr.c: the TCP data phase after probe @f (heap; taken over) succeeded from @a: admission,
 * create (owned by @owner, the directory's), the rest of the data, seal or abort (pull
 * thread). */
int ferry__objmgr_pull_tcp_probed(struct ferry__objmgr *om, const struct ferry__node_addr *a,
				  const struct ferry__node_addr *helpers, unsigned nhelpers,
				  const struct ferry_object_id *id, struct ferry__objmgr_fetch *f,
				  const struct ferry_worker_id *owner, uint64_t *bytes);
/* objmgr.c: end pull @p with @res: out of the map, counted, each waiter's callback, freed.
 * ferry__objmgr_enqueue(): queue @p for a pull thread (om->lock held). */
void ferry__objmgr_finish(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
			  struct ferry__objmgr_result *res);
void ferry__objmgr_enqueue(struct ferry__objmgr *om, struct ferry__objmgr_pull *p);

/* objmgr_tcp.c: start probe @f (f->on_done set, f->om filled) on the loop without waiting.
 * Returns 0 (on_done will be called on the loop) or -errno (it will not). */
int ferry__objmgr_fetch_start_async(struct ferry__objmgr *om, struct ferry__objmgr_fetch *f);

/* objmgr_tcp.c: run fetches @f[0..@n) on the loop at once and wait for all (pull thread);
 * each gets its f->status. */
void ferry__objmgr_fetch_run_many(struct ferry__objmgr *om, struct ferry__objmgr_fetch *f,
				  unsigned n);
/* Before the loop runs: the peer set of TCP pulls. */
void ferry__objmgr_tcp_init(struct ferry__objmgr *om);
/* On the loop at stop: fail every fetch with -ECANCELED, destroy the TCP engine. */
void ferry__objmgr_tcp_shutdown(struct ferry__objmgr *om);
/* After the loop is destroyed: free what is left. */
void ferry__objmgr_tcp_free(struct ferry__objmgr *om);

uint64_t ferry__objmgr_now_us(void);

/* objmgr.c: the transport pull_from() uses first for @a (FERRY_GCS_TRANSPORT_*; 0: none):
 * shm with a store on this host, else RDMA, else TCP. */
unsigned ferry__objmgr_transport_for(const struct ferry__objmgr *om,
				     const struct ferry__node_addr *a);
/* transport/objmgr_nodes.c: the peers' addresses. nodes_start: follow the deaths channel (at
 * create; 0 without a GCS). want_peers: look up those of @ids not known yet, all at once, not
 * waiting. node_address: @node's address, waiting a little for a lookup under way; 0, or
 * -EHOSTUNREACH (unknown, dead, or the lookup failed). Pull threads. */
int ferry__objmgr_nodes_start(struct ferry__objmgr *om);
void ferry__objmgr_want_peers(struct ferry__objmgr *om, const struct ferry_node_id *ids,
			      uint32_t n);
int ferry__objmgr_node_address(struct ferry__objmgr *om, const struct ferry_node_id *node,
			       struct ferry__node_addr *out);

/* The order locations are tried in: those on this host (with an address: @have[i] == 0) moved
 * to the front, in place over the three parallel arrays. */
void ferry__objmgr_same_host_first(const struct ferry__objmgr *om, struct ferry_node_id *locs,
				   uint32_t n, struct ferry__node_addr *addrs, int *have);

/* objmgr.c: the pull admission limit (pull thread): reserve @bytes, waiting while others are
 * in flight and the sum would pass it. 0, or -ECANCELED (stopping: nothing reserved). */
int ferry__objmgr_admit(struct ferry__objmgr *om, uint64_t bytes);
void ferry__objmgr_unadmit(struct ferry__objmgr *om, uint64_t bytes);
/* The same without waiting (the loop): 0 reserved, -EAGAIN it would wait, -ECANCELED. */
int ferry__objmgr_try_admit(struct ferry__objmgr *om, uint64_t bytes);

/* objmgr_rdma.c (objmgr_rdma_none.c without verbs). start: before the loop runs; -ENODEV
 * where no RDMA device routes to the node's address. pull: a pull thread's whole data phase
 * from @a (probe, create, READ, seal or abort); *@bytes = data + metadata on success. @sizes,
 * the directory's, let the copy be created while the probe is out. shutdown:
 * on the loop at stop. free: after the loop is destroyed. */
struct ferry__objmgr_rdma;
int ferry__objmgr_rdma_start(struct ferry__objmgr *om);
int ferry__objmgr_rdma_pull(struct ferry__objmgr *om, const struct ferry__node_addr *a,
			    const struct ferry_object_id *id,
			    const struct ferry__objmgr_sizes *sizes, uint64_t *bytes);
void ferry__objmgr_rdma_shutdown(struct ferry__objmgr *om);
/* The RDMA part of the loop's poller when it spins (objmgr.c, spin_poll): the CQ. */
int ferry__objmgr_rdma_spin_poll(struct ferry__objmgr *om, bool sleeping);
void ferry__objmgr_rdma_free(struct ferry__objmgr *om);
/* objmgr_rdma.c: the fast path's probe of @p from @a, on the loop without a pull thread (om->lock
 * held; its end calls ferry__objmgr_fast_probed() on the loop). false: not started. */
bool ferry__objmgr_rdma_fast_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
				   const struct ferry__node_addr *a);
/* objmgr_rdma.c: a large object's pull from @a run by the loop (om->lock held): the probe goes
 * at once and @p is queued (p->big set) for a pull thread, which only creates the copy with
 * ferry__objmgr_rdma_big_create(); the loop READs, seals and finishes, or hands over through
 * ferry__objmgr_fast_filled(). false: not started (nothing queued). */
bool ferry__objmgr_rdma_big_start(struct ferry__objmgr *om, struct ferry__objmgr_pull *p,
				  const struct ferry__node_addr *a);
void ferry__objmgr_rdma_big_create(struct ferry__objmgr *om, struct ferry__objmgr_pull *p);

/*
 * objmgr_wait.c, the pulls that wait for their object (om->lock held for all but _wake):
 * _park() - after a failed attempt of @p with @status: true when @p waits for another
 *   attempt (parked, or queued at once after a location event), false when it ends now.
 * _due() - queue the parked pulls whose time came; the earliest due time left (0: none).
 * _wake() - a location event for @id (GCS client thread): a parked pull of it goes at once.
 * _take_all() - at stop (threads joined): the parked pulls, taken out of the list (park_next).
 */
bool ferry__objmgr_wait_park(struct ferry__objmgr *om, struct ferry__objmgr_pull *p, int status);
uint64_t ferry__objmgr_wait_due(struct ferry__objmgr *om, uint64_t now_us);
void ferry__objmgr_wait_wake(struct ferry__objmgr *om, const struct ferry_object_id *id);
struct ferry__objmgr_pull *ferry__objmgr_wait_take_all(struct ferry__objmgr *om);
/* Pull threads (om->lock held): sleep on work_cond until there is work or stopping, queueing
 * parked pulls as they fall due. true: nothing came for opts.thread_idle_ms and no pull is
 * parked, so the thread may leave (objmgr_pool.c). */
bool ferry__objmgr_wait_for_work(struct ferry__objmgr *om);
/* A pull ends with @status: a WARN when it waited and ends without its object. */
void ferry__objmgr_wait_log_end(const struct ferry__objmgr_pull *p, int status);
/* At stop, the pull threads joined (om->lock not held): parked pulls end -ECANCELED. */
void ferry__objmgr_wait_cancel_all(struct ferry__objmgr *om);

/* objmgr_pool.c: the pull threads, started when pulls queue and none is free to take them,
 * leaving after opts.thread_idle_ms without work (an idle node runs none). */
enum { FERRY__PULLER_NONE, FERRY__PULLER_RUNNING, FERRY__PULLER_EXITED };
struct ferry__objmgr_puller {
	struct ferry__objmgr *om; /* owner */
	pthread_t thread;	  /* valid unless state is FERRY__PULLER_NONE */
	int state;		  /* FERRY__PULLER_*, under om->lock */
};
int ferry__objmgr_pool_init(struct ferry__objmgr *om);
/* A pull was queued (om->lock held): start a thread if none is free to take it. */
void ferry__objmgr_pool_grow(struct ferry__objmgr *om);
/* At stop (stopping set, om->lock not held): every thread joined, the queue drained by them. */
void ferry__objmgr_pool_stop(struct ferry__objmgr *om);
void ferry__objmgr_pool_free(struct ferry__objmgr *om);
/* objmgr.c: a pull thread's body (@arg: its struct ferry__objmgr_puller). */
void *ferry__objmgr_pull_thread(void *arg);

/* objmgr_locs.c: set up once (no-op when running or without a GCS); follow @id's locations
 * (a keyed subscription, sent async; no-op when followed already or without a GCS; not under
 * om->lock); the cached locations of @id into @out (FERRY__OBJMGR_CACHED_LOCATIONS room), how
 * many (0: not cached, look it up), its sizes as the directory has them (*@sizes, may be
 * NULL) and where each copy lies in its store (@places, as many as @out, may be NULL); the
 * counters into @out; free it (after the GCS client is gone). */
void ferry__objmgr_locs_start(struct ferry__objmgr *om);
void ferry__objmgr_locs_follow(struct ferry__objmgr *om, const struct ferry_object_id *id);
void ferry__objmgr_locs_stats(struct ferry__objmgr *om, struct ferry__objmgr_stats *out);
uint32_t ferry__objmgr_locs_get(struct ferry__objmgr *om, const struct ferry_object_id *id,
				struct ferry_node_id *out, struct ferry__objmgr_sizes *sizes,
				struct ferry_gcs_object_place *places);
/* ferry__objmgr_locs_await() - as _get, but once @id's subscription has answered: waits (a
 * pull thread, at most 2 s) for its snapshot's end, then the count (0: the directory lists no
 * copy yet; its put will come as an event). -EAGAIN: the cache cannot say (not followed or no
 * longer, refused, no end in time): look it up. */
int ferry__objmgr_locs_await(struct ferry__objmgr *om, const struct ferry_object_id *id,
			     struct ferry_node_id *out, struct ferry__objmgr_sizes *sizes);
void ferry__objmgr_locs_fini(struct ferry__objmgr *om);

/* Tests only: when not 0, the location cache's bound (objects followed) instead of 4096. */
extern unsigned ferry__objmgr_locs_limit;
/* Tests only: when set, called with an object's sizes as read from the location cache or the
 * GCS (to make them stale, as a record written without the metadata size is). */
extern void (*ferry__objmgr_sizes_hook)(const struct ferry_object_id *id,
					struct ferry__objmgr_sizes *sizes);
/* Tests only: when set, called with the place of the location a fast-path pull chose, as read
 * from the location cache (to make it stale). */
extern void (*ferry__objmgr_place_hook)(const struct ferry_object_id *id,
					struct ferry_gcs_object_place *place);

/* Tests only: when set, called on the pull thread right after a pull sealed its copy, before
 * anything records it or any callback runs (to delete or evict the copy at that point). */
extern void (*ferry__objmgr_sealed_hook)(struct ferry__objmgr *om,
					 const struct ferry_object_id *id);

#endif
