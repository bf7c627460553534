/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP engine of the transport, on the io_uring loop (common/loop.h): endpoints of several
 * sockets to one peer, in-order control messages, and bulk data streamed from a sender's memory
 * (the store arena, with SEND_ZC for large chunks) straight into a receiver's buffer (recv into
 * the destination: no user-space copy on either side).
 *
 * Data model. The receiver first announces where a transfer goes: ferry__tcp_expect(ep, xfer,
 * buf, len). It then tells the sender (a control message of the caller's protocol) to go; the
 * sender calls ferry__tcp_send_data(ep, xfer, buf, len). The bytes travel as data frames
 * (DataChunk: {xfer, offset} + bytes) striped over the endpoint's sockets; the receiver reads
 * each frame's header and then receives its payload directly at buf + offset. Data for a transfer nobody
 * expects (cancelled, timed out) is read into a scratch buffer and dropped, with a debug log.
 *
 * Thread model: not thread-safe. A context and everything made from it belong to the loop's
 * thread; every callback runs there. Callback rule (libuv's): a function that takes a callback
 * and returns an error never calls it; when it returns 0 the callback runs exactly once, never
 * from inside the submitting call. Callbacks may submit work and may destroy endpoints (even
 * their own); they must not destroy the context.
 */
#ifndef FERRY_TRANSPORT_TCP_H
#define FERRY_TRANSPORT_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ferry__loop;
struct ferry__tcp_ctx;
struct ferry__tcp_ep;
struct ferry__tcp_listener;

/* Options for ferry__tcp_ctx_create(). Zero means the default for every field but loop. */
struct ferry__tcp_ctx_opts {
	struct ferry__loop *loop;    /* the loop everything runs on (required) */
	const void *token;	     /* cluster token (opaque bytes; NULL = empty) */
	size_t token_size;	     /* its length */
	uint32_t conns_per_peer;     /* sockets per endpoint, data striped over them; 0 = 4 */
	uint32_t chunk_size;	     /* payload bytes per data frame; 0 = 1 MiB */
	uint32_t zc_threshold;	     /* data frames from this size go with SEND_ZC; 0 = 64 KiB */
	uint32_t max_msg;	     /* largest control message; 0 = 1 MiB */
	uint32_t connect_timeout_ms; /* connect + handshake deadline; 0 = 10000 */
	uint32_t op_timeout_ms;	     /* deadline of each expect/send_data; 0 = 30000 */
	uint32_t sock_buf_bytes;     /* SO_SNDBUF and SO_RCVBUF; 0 = kernel autotuning */
	uint32_t flags;		     /* FERRY__TCP_* below */
	uint32_t poll_us;	     /* polled receive (ferry__tcp_poll); 0 = off */
	/*
	 * A peer that sends requests and never reads the replies: past @max_queued_bytes of
	 * control frames unsent on an endpoint, its control messages are not read until they
	 * drain below (backpressure); past it for @stall_timeout_ms the endpoint fails with
	 * -ETIMEDOUT (logged). Data transfers are not counted: they send from the caller's
	 * buffer and have their own deadline. 0 = none / never.
	 */
	uint32_t max_queued_bytes;
	uint32_t stall_timeout_ms;
};

/*
 * Zero copy to a peer on this host: the kernel copies zero-copy pages on local delivery anyway,
 * and waiting for their notifications halved loopback throughput, so endpoints whose peer
 * address is local send with plain copies unless this flag is set (tests use it to exercise the
 * zero-copy path on loopback).
 */
#define FERRY__TCP_ZC_LOCAL (1u << 0)

/*
 * Endpoint callbacks (the RDMA engine's shape). @arg is the one given to connect/listen (or
 * ferry__tcp_ep_set_arg()).
 * on_connect: a connecting endpoint is established (0) or failed (-ECONNREFUSED, -EACCES bad
 *   token, -EPROTO, -ETIMEDOUT, -EHOSTUNREACH...); after a failure nothing else is called,
 *   destroy it. For a listener: called once with 0 for each new established endpoint (all of
 *   its sockets joined), which the callee then owns and must destroy.
 * on_message: one control message, in order: the whole frame (common/frame.h: the 8-byte
 *   header, whose magic, version, known type and length the engine checked, then the payload,
 *   which it did not verify). @buf is valid only during the call. May be NULL.
 * on_close: an established endpoint lost a socket (peer closed or died, a protocol error, an
 *   op deadline): -ECONNRESET, -ETIMEDOUT, -EPROTO, -EIO, -ENOMEM. Called once, after every
 *   outstanding expect/send_data got its callback. Destroy it then.
 *
 * Buffers and cancellation: a transfer's callback runs only once the kernel no longer reads or
 * writes its buffer. A transfer with no receive or send into its buffer in progress completes
 * at once where the text below says "from inside this call"; one with kernel I/O on its buffer
 * (a recv landing in it, a send or zero-copy notification still owed) completes, with the same
 * status, when that I/O ends: a later loop pass, or ferry__loop_destroy().
 */
struct ferry__tcp_ep_cbs {
	void (*on_connect)(struct ferry__tcp_ep *ep, int status, void *arg); /* see above */
	void (*on_message)(struct ferry__tcp_ep *ep, const void *buf, size_t len,
			   void *arg);					   /* may be NULL */
	void (*on_close)(struct ferry__tcp_ep *ep, int reason, void *arg); /* may be NULL */
};

/* A transfer's completion: 0 when every byte landed (expect) or the kernel no longer reads the
 * source (send_data), else -errno. */
typedef void (*ferry__tcp_xfer_cb)(void *arg, int status);

int ferry__tcp_ctx_create(const struct ferry__tcp_ctx_opts *opts, struct ferry__tcp_ctx **out);

/*
 * ferry__tcp_poll() - for a context whose loop busy-polls (opts.poll_us set; see tcp.c,
 * "Polled receive"): read what has arrived on the control sockets being polled, and run it as
 * a completed receive would. The loop's poller (ferry__loop_set_poller) calls it on every spin
 * pass with @sleeping false; with @sleeping true, before the loop sleeps, it hands every polled
 * socket back to an armed io_uring receive, so that data wakes the loop. Returns how many
 * sockets had something (> 0: a busy pass). Loop thread only; a no-op when poll_us is 0.
 * poll_us needs a loop with a spin window (create fails with -EINVAL otherwise), and the loop's
 * poller must call this: a polled socket is read by nothing else.
 */
int ferry__tcp_poll(struct ferry__tcp_ctx *ctx, bool sleeping);
/* Destroys every endpoint and listener still open (outstanding transfers complete with
 * -ECANCELED from inside this call, see "Buffers and cancellation"). Accepts NULL. Not from
 * inside a callback. Call it before ferry__loop_destroy(): memory the kernel still references
 * is freed by the loop's last completions (a later run, or the loop's destroy). */
void ferry__tcp_ctx_destroy(struct ferry__tcp_ctx *ctx);

/* Listen on @ip:@port (port 0: ephemeral). Returns 0, -EINVAL, -EADDRINUSE, -ENOMEM.
 * Sockets with a wrong token or protocol version are refused (a TransferHandshakeReply with
 * -EACCES or -EPROTO, a log line, closed); sockets that send no TransferHandshake within
 * connect_timeout_ms, or garbage, or frames of another framing, are closed (logged); the
 * listener keeps serving.
 * Destroying it drops endpoints still forming; reported ones are unaffected. */
int ferry__tcp_listen(struct ferry__tcp_ctx *ctx, const char *ip, uint16_t port,
		      const struct ferry__tcp_ep_cbs *cbs, void *arg,
		      struct ferry__tcp_listener **out);
uint16_t ferry__tcp_listener_port(const struct ferry__tcp_listener *l);
void ferry__tcp_listener_destroy(struct ferry__tcp_listener *l);

/* Connect conns_per_peer sockets to @ip:@port and run the token handshake on each; on_connect
 * runs once when all joined or one failed. After a 0 return the caller destroys *@out. */
int ferry__tcp_connect(struct ferry__tcp_ctx *ctx, const char *ip, uint16_t port,
		       unsigned timeout_ms, const struct ferry__tcp_ep_cbs *cbs, void *arg,
		       struct ferry__tcp_ep **out);

/* Close every socket (the peer sees on_close) and free. Outstanding transfers complete with
 * -ECANCELED from inside this call (see "Buffers and cancellation": one whose buffer the kernel
 * is using completes later). No on_connect/on_close follows. Accepts NULL; may be called from
 * any callback. */
void ferry__tcp_ep_destroy(struct ferry__tcp_ep *ep);
void ferry__tcp_ep_set_arg(struct ferry__tcp_ep *ep, void *arg);
void *ferry__tcp_ep_arg(const struct ferry__tcp_ep *ep);

/* Send one control message (copied): a whole frame of @len bytes (common/frame.h, e.g. from
 * ferry__frame_finish), of any known MessageType but the engine's own (TransferHandshake,
 * TransferHandshakeReply, DataChunk). Returns 0, -ENOTCONN, -EMSGSIZE (payload > max_msg,
 * logged), -EINVAL (not such a frame, or its length field is not @len - 8: logged), -ENOMEM. */
int ferry__tcp_send(struct ferry__tcp_ep *ep, const void *frame, size_t len);

/* Receive transfer @xfer (an id unique on this endpoint while active) into @buf[0..@len).
 * Returns 0, -EEXIST (@xfer active), -ENOTCONN, -EINVAL (no @cb), -ENOMEM. A zero-length
 * transfer completes on the next pass (and its id is free again at once). Data frames are
 * received straight into @buf; one outside [0, @len) or more bytes than @len in total is a
 * protocol error (-EPROTO for everything on the endpoint, which closes). */
int ferry__tcp_expect(struct ferry__tcp_ep *ep, uint64_t xfer, void *buf, size_t len,
		      ferry__tcp_xfer_cb cb, void *arg);
/* Drop an expected transfer: its callback runs with -ECANCELED on the next pass (or when a
 * recv into @buf in progress ends); later data is discarded. Returns 0 or -ENOENT. */
int ferry__tcp_cancel_expect(struct ferry__tcp_ep *ep, uint64_t xfer);

/* Stream @buf[0..@len) as transfer @xfer in chunk_size frames over the endpoint's sockets
 * (SEND_ZC from zc_threshold, see FERRY__TCP_ZC_LOCAL); @buf stays untouched until @cb, which
 * runs after the last zero-copy notification. Transfers go out oldest first. Data the peer
 * does not expect is dropped there: 0 here means sent, not received. Returns 0, -ENOTCONN,
 * -EINVAL (no @cb), -ENOMEM. */
int ferry__tcp_send_data(struct ferry__tcp_ep *ep, uint64_t xfer, const void *buf, size_t len,
			 ferry__tcp_xfer_cb cb, void *arg);

#endif
