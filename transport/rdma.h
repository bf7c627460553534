/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The RDMA engine of the transport: rdma_cm connections, SEND/RECV control messages with
 * credit flow control, and pipelined RDMA READs from a peer's registered arena straight into
 * ours. A non-blocking state machine driven by fd readiness (UCX's progress model): watch the
 * two fds from ferry__rdma_ctx_fds() for POLLIN, wait at most ferry__rdma_ctx_timeout_ms(),
 * then call ferry__rdma_progress(), which drains events and completions and runs callbacks.
 *
 * Thread model: not thread-safe. A context and everything made from it (listeners, endpoints,
 * operations) belong to one thread; every callback runs on it, inside ferry__rdma_progress()
 * or inside a destroy function (which cancels what is outstanding).
 *
 * Callback rule (libuv's): a function that takes a callback and returns an error never calls
 * it; when it returns 0 the callback runs exactly once, never from inside the submitting call.
 * Callbacks may submit work and may destroy endpoints (even their own); they must not destroy
 * the context.
 */
#ifndef FERRY_TRANSPORT_RDMA_H
#define FERRY_TRANSPORT_RDMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ferry__rdma_ctx;
struct ferry__rdma_ep;
struct ferry__rdma_listener;

/* Token bytes carried in the connect request; longer tokens are reduced to a digest. */
#define FERRY__RDMA_TOKEN_MAX 40
/* Wire version in the connect private data; a listener rejects any other (-EPROTO). */
#define FERRY__RDMA_VERSION 1

/* Options for ferry__rdma_ctx_create(). Zero means the default for every field but ip/region. */
struct ferry__rdma_ctx_opts {
	const char *ip;		     /* IPv4/IPv6 literal: the device that routes to it is opened */
	void *region;		     /* arena registered once as the context's memory region */
	size_t region_size;	     /* its length in bytes (> 0) */
	const void *token;	     /* cluster token (opaque bytes; NULL = empty) */
	size_t token_size;	     /* its length */
	uint32_t recv_depth;	     /* receive buffers posted per endpoint (>= 4); 0 = 32 */
	uint32_t msg_size;	     /* bytes per control buffer (64..1 MiB); 0 = 4096 */
	uint32_t max_reads;	     /* READ work requests in flight per endpoint; 0 = 32 */
	uint32_t connect_timeout_ms; /* default connect/accept deadline; 0 = 10000 */
	uint32_t op_timeout_ms;	     /* deadline of each READ from its submission; 0 = 30000 */
	int busy_poll;		     /* spin on the CQ while work is in flight (see timeout_ms) */
	int caller_arms;	     /* the completion event is armed only by ferry__rdma_poll() */
};

/*
 * Endpoint callbacks. @arg is the one given to connect/listen (or ferry__rdma_ep_set_arg()).
 * on_connect: a connecting endpoint is established (0) or failed (-errno: -ECONNREFUSED no
 *   listener or refused, -EACCES bad token, -EPROTO version mismatch, -ETIMEDOUT deadline,
 *   -EHOSTUNREACH/-ENETUNREACH no route); after a failure nothing else is called, destroy it.
 *   For a listener: called once with 0 for each new established endpoint, which the callee
 *   then owns and must destroy.
 * on_message: one control message, in order. @buf is valid only during the call. May be NULL.
 * on_close: an established endpoint lost its connection (peer disconnected or died, transport
 *   error, a READ deadline): -ECONNRESET, -ETIMEDOUT, -EFAULT (a READ outside the remote region),
 *   -EIO, -EPROTO. Called once, after every outstanding READ got its callback. Destroy it then.
 */
struct ferry__rdma_ep_cbs {
	void (*on_connect)(struct ferry__rdma_ep *ep, int status, void *arg); /* see above */
	void (*on_message)(struct ferry__rdma_ep *ep, const void *buf, size_t len,
			   void *arg);					    /* may be NULL */
	void (*on_close)(struct ferry__rdma_ep *ep, int reason, void *arg); /* may be NULL */
};

/* A READ's completion: 0 when every byte landed, else -errno (see ferry__rdma_read()). */
typedef void (*ferry__rdma_read_cb)(void *arg, int status);

/*
 * ferry__rdma_ctx_create() - open the RDMA device that routes to @opts->ip (rdma_cm address
 * resolution; a local address binds at once, a remote one may block up to 2 s), allocate a
 * protection domain, one completion queue with a completion channel, and register
 * [@opts->region, +region_size) once with local write and remote read access (never remote
 * write). Both fds are non-blocking.
 * Returns 0 and *@out, or -EINVAL (bad options, logged), -ENODEV (no RDMA device routes to the
 * address, or no RDMA stack at all), -ENOMEM, or another -errno from verbs.
 */
int ferry__rdma_ctx_create(const struct ferry__rdma_ctx_opts *opts, struct ferry__rdma_ctx **out);

/*
 * ferry__rdma_ctx_destroy() - destroy every endpoint and listener still open (outstanding
 * READs complete with -ECANCELED, from inside this call), then the context. Accepts NULL.
 * Not from inside a callback.
 */
void ferry__rdma_ctx_destroy(struct ferry__rdma_ctx *ctx);

/* ferry__rdma_ctx_fds() - the rdma_cm event channel fd and the CQ completion channel fd. */
void ferry__rdma_ctx_fds(const struct ferry__rdma_ctx *ctx, int *cm_fd, int *cq_fd);

/*
 * ferry__rdma_ctx_timeout_ms() - how long the caller may sleep on the fds before it must call
 * progress: -1 forever, 0 now (deferred callbacks are due, or busy-poll with work in flight),
 * else milliseconds until the next deadline.
 */
int ferry__rdma_ctx_timeout_ms(const struct ferry__rdma_ctx *ctx);

/*
 * ferry__rdma_progress() - drain rdma_cm events and completions, expire deadlines, run due
 * callbacks. Never blocks. Returns the number of events and completions handled (>= 0), or a
 * -errno when the event channel itself failed.
 */
int ferry__rdma_progress(struct ferry__rdma_ctx *ctx);

/*
 * ferry__rdma_poll() - for a caller that busy-polls (opts.caller_arms): poll the CQ and run the
 * completions' callbacks; with @arm, then arm the completion event and poll once more, so that a
 * caller that sees 0 may sleep on the event fd. With caller_arms, ferry__rdma_progress() never
 * arms: while the caller spins, a completion costs no event (a softirq, an event queue entry and
 * a wake-up in the kernel). Returns completions handled (>= 0) or -EIO. Call
 * ferry__rdma_progress() after one that handled any (endpoints they failed are closed there).
 */
int ferry__rdma_poll(struct ferry__rdma_ctx *ctx, bool arm);

/* ferry__rdma_ctx_region() - what a peer needs to READ our region: its address and rkey. */
void ferry__rdma_ctx_region(const struct ferry__rdma_ctx *ctx, uint64_t *addr, uint32_t *rkey);

/*
 * ferry__rdma_ep_peer_region() - the region of the peer this endpoint connected to, as its
 * accept said (a connector's only: the acceptor learns nothing of the connector's). 0 and
 * *@addr, *@len, *@rkey; -ENODATA: not connected by us, not yet established, or the peer named
 * none. A READ outside it would fail and take the endpoint down: check before posting.
 */
int ferry__rdma_ep_peer_region(const struct ferry__rdma_ep *ep, uint64_t *addr, uint64_t *len,
			       uint32_t *rkey);

/* ferry__rdma_ctx_device() - the opened device's name ("rxe0"), for logs. */
const char *ferry__rdma_ctx_device(const struct ferry__rdma_ctx *ctx);

/*
 * ferry__rdma_listen() - accept connections on @ip:@port (port 0: an ephemeral one, see
 * ferry__rdma_listener_port()). The address must belong to the context's device. Connect
 * requests with a wrong token or version are rejected with a log line; the listener keeps
 * serving. Accepted endpoints use @cbs (copied) and @arg; see on_connect.
 * Returns 0 and *@out, -EINVAL (bad address), -EADDRINUSE, -ENODEV (address on another
 * device), -ENOMEM.
 */
int ferry__rdma_listen(struct ferry__rdma_ctx *ctx, const char *ip, uint16_t port,
		       const struct ferry__rdma_ep_cbs *cbs, void *arg,
		       struct ferry__rdma_listener **out);

/* ferry__rdma_listener_port() - the port it listens on (host order). */
uint16_t ferry__rdma_listener_port(const struct ferry__rdma_listener *l);

/* ferry__rdma_listener_destroy() - stop listening; endpoints not yet reported through
 * on_connect are dropped, reported ones are unaffected. Accepts NULL. */
void ferry__rdma_listener_destroy(struct ferry__rdma_listener *l);

/*
 * ferry__rdma_connect() - start connecting to @ip:@port (without binding a source address),
 * carrying the context's token. @timeout_ms bounds the whole handshake (0: the context's
 * default). Returns 0 and *@out, after which on_connect runs exactly once; or -EINVAL (bad
 * address or callbacks), -ENOMEM, -ENOBUFS (completion queue cannot grow), or a -errno from
 * verbs (registering the endpoint's message buffers). After a 0 return the caller destroys
 * *@out, whatever on_connect reports.
 */
int ferry__rdma_connect(struct ferry__rdma_ctx *ctx, const char *ip, uint16_t port,
			unsigned timeout_ms, const struct ferry__rdma_ep_cbs *cbs, void *arg,
			struct ferry__rdma_ep **out);

/*
 * ferry__rdma_ep_destroy() - disconnect (the peer sees on_close) and free. Every outstanding
 * READ completes with -ECANCELED from inside this call; no on_connect/on_close follows. Accepts
 * NULL; may be called from any callback, including the endpoint's own.
 */
void ferry__rdma_ep_destroy(struct ferry__rdma_ep *ep);

/* Per-endpoint user data passed to its callbacks (set in on_connect for accepted ones). */
void ferry__rdma_ep_set_arg(struct ferry__rdma_ep *ep, void *arg);
void *ferry__rdma_ep_arg(const struct ferry__rdma_ep *ep);

/* ferry__rdma_ep_max_msg() - the largest message ferry__rdma_send() takes (0 before
 * established). */
size_t ferry__rdma_ep_max_msg(const struct ferry__rdma_ep *ep);

/*
 * ferry__rdma_send() - send @len bytes (copied; @buf is free again on return) as one control
 * message. Messages arrive in order. Never more are in flight than the peer has receive
 * buffers posted: beyond that they queue (in memory) until credits return.
 * Returns 0, -ENOTCONN (not established or closed), -EMSGSIZE (> ferry__rdma_ep_max_msg(),
 * logged), -ENOMEM (queueing). Delivery failures surface as on_close.
 */
int ferry__rdma_send(struct ferry__rdma_ep *ep, const void *buf, size_t len);

/*
 * ferry__rdma_read() - RDMA READ @len bytes at @remote_addr (@rkey: the peer's region) into
 * @local, which must lie inside this context's region. The range is split into @chunk_size
 * pieces (0: 1 MiB) with at most @depth (0: 4; capped at the context's max_reads) in flight for
 * this read; several reads on one endpoint share its max_reads. A zero-length READ is a round
 * trip. @local must stay valid and untouched until @cb.
 * Returns 0 (then @cb runs once with the result), -ENOTCONN, -EINVAL (range outside the local
 * region, logged; NULL @cb), -ENOMEM.
 * @cb's status: 0; -EFAULT the peer refused the range or rkey (remote access error: this
 * endpoint is then torn down, its other READs get -ECONNRESET); -ECONNRESET the connection
 * failed; -ETIMEDOUT the context's op deadline passed (if any chunk was already posted, the
 * endpoint is torn down too, since posted READs cannot be recalled); -EIO another transport
 * error; -ECANCELED the endpoint or context was destroyed.
 * Several QPs per peer are not implemented: open several endpoints instead.
 */
int ferry__rdma_read(struct ferry__rdma_ep *ep, void *local, uint64_t remote_addr, uint32_t rkey,
		     size_t len, size_t chunk_size, unsigned depth, ferry__rdma_read_cb cb,
		     void *arg);

/* Test hooks: act on READ completions as they are polled. */
enum ferry__rdma_fault {
	FERRY__RDMA_FAULT_NONE = 0,	 /* disarm */
	FERRY__RDMA_FAULT_DROP_READ = 1, /* forget a completion: the READ can only time out */
	FERRY__RDMA_FAULT_FAIL_READ = 2, /* turn a completion into an error (-EIO) */
};

/* ferry__rdma_inject_fault() - apply @fault to the READ completion @nth from now (0: the next
 * one), once. */
void ferry__rdma_inject_fault(struct ferry__rdma_ctx *ctx, enum ferry__rdma_fault fault,
			      unsigned nth);

#endif
