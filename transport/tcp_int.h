/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the TCP engine shared by tcp.c (context, listeners, handshake, endpoint
 * lifecycle) and tcp_io.c (frames, receive and send paths, transfers). See the DESIGN block in
 * tcp.c. Tests and the fuzz target include it for the frame codec and ferry__tcp_ep_adopt().
 */
#ifndef FERRY_TRANSPORT_TCP_INT_H
#define FERRY_TRANSPORT_TCP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/frame.h"
#include "common/hashmap.h"
#include "common/loop.h"
#include "common/wire.h"
#include "transport/tcp.h"

#define TCP_LOG "tcp"

/* ---- wire format (tcp_wire.c) ---- */

/*
 * Every frame is the common frame of every stream socket (common/frame.h, schema/messages.fbs):
 * an 8-byte header (magic 0xFE, version 1, uint16 MessageType, uint32 payload length), then the
 * payload. The engine's own types: TransferHandshake / TransferHandshakeReply (the first frame
 * each way on a socket; schema/transport.fbs) and DataChunk, struct-framed: its 16-byte struct
 * {xfer, offset} then the raw bytes. Any other known type is a control message of the caller's
 * protocol (socket 0 only), passed through whole: header and payload.
 */
#define FERRY__TCP_HDR_SIZE FERRY_FRAME_HEADER_SIZE
/* A data frame's header and DataChunk struct: what precedes its raw bytes. */
#define FERRY__TCP_DATA_HDR_SIZE (FERRY_FRAME_HEADER_SIZE + FERRY__WIRE_DATA_CHUNK_BYTES)
#define FERRY__TCP_MAX_CHUNK (16u << 20) /* largest DATA payload either side accepts */
#define FERRY__TCP_MAX_CONNS 64		 /* sockets per endpoint */
#define FERRY__TCP_TOKEN_MAX 1024	 /* token bytes carried in TransferHandshake */
#define FERRY__TCP_HELLO_MAX (FERRY__TCP_TOKEN_MAX + 256) /* its payload, token included */
#define FERRY__TCP_ACK_MAX 256				  /* a TransferHandshakeReply's payload */

/* What a frame's MessageType is to the engine. */
enum ferry__tcp_kind {
	FERRY__TCP_MSG = 1,   /* a control message (socket 0 only) */
	FERRY__TCP_DATA = 2,  /* DataChunk: a piece of a transfer */
	FERRY__TCP_HELLO = 3, /* TransferHandshake: first frame of a connecting socket */
	FERRY__TCP_ACK = 4,   /* TransferHandshakeReply: the listener's answer */
};

/* A decoded frame header (and, for DATA, its DataChunk struct). */
struct ferry__tcp_hdr {
	uint8_t kind;	 /* enum ferry__tcp_kind */
	uint16_t type;	 /* MessageType */
	uint32_t len;	 /* payload bytes; DATA: the raw bytes after the struct */
	uint64_t xfer;	 /* DATA: transfer id */
	uint64_t offset; /* DATA: where the raw bytes go in the transfer */
};

/* A data frame's header and struct: FERRY__TCP_DATA_HDR_SIZE bytes. */
void ferry__tcp_data_hdr_encode(uint8_t out[FERRY__TCP_DATA_HDR_SIZE], uint64_t xfer,
				uint64_t offset, uint32_t len);
/*
 * Decode and check a frame header: magic and version (-EPROTONOSUPPORT: another framing, such
 * as a peer of wire protocol 2 and its 24-byte 0xFC header), then a known type and its cap
 * (-EPROTO): a control message <= @max_msg, DATA 16 bytes of struct + at most
 * FERRY__TCP_MAX_CHUNK, HELLO <= FERRY__TCP_HELLO_MAX, ACK <= FERRY__TCP_ACK_MAX. Not logged:
 * the caller knows the peer. For DATA, ferry__tcp_data_struct_decode() completes @out.
 */
int ferry__tcp_hdr_decode(const uint8_t in[FERRY__TCP_HDR_SIZE], uint32_t max_msg,
			  struct ferry__tcp_hdr *out);
/* The DataChunk struct after a DATA header: 0, or -EPROTO when offset + len overflows. */
int ferry__tcp_data_struct_decode(const uint8_t in[FERRY__WIRE_DATA_CHUNK_BYTES],
				  struct ferry__tcp_hdr *h);

/* A TransferHandshake, as the listener reads it. */
struct ferry__tcp_hello {
	uint32_t version;     /* the peer's wire protocol version */
	const uint8_t *token; /* in the payload */
	size_t token_len;     /* <= FERRY__TCP_TOKEN_MAX */
	uint64_t nonce;	      /* groups the endpoint's sockets */
	unsigned index;	      /* < count */
	unsigned count;	      /* 1..FERRY__TCP_MAX_CONNS */
};

/* The TransferHandshake frame of socket @index of @count: *@frame (free with ferry__free),
 * *@size bytes. 0, -ENOMEM. */
int ferry__tcp_hello_frame(const void *token, size_t token_len, uint64_t nonce, unsigned index,
			   unsigned count, uint8_t **frame, size_t *size);
/* 0, or -EPROTO: malformed, a token over FERRY__TCP_TOKEN_MAX or an index/count out of range
 * (the version is the caller's to judge). */
int ferry__tcp_hello_parse(const void *payload, size_t len, struct ferry__tcp_hello *out);
/* The TransferHandshakeReply frame with @status (0 or -errno). 0, -ENOMEM. */
int ferry__tcp_ack_frame(int status, uint8_t **frame, size_t *size);
/* Its status (0 or -errno), or -EPROTO when it is malformed or the status is not an errno. */
int ferry__tcp_ack_parse(const void *payload, size_t len);

/* ---- lists ---- */

struct tcp_link {
	struct tcp_link *prev; /* previous element, or the head */
	struct tcp_link *next; /* next element, or the head */
};

static inline void tcp_list_init(struct tcp_link *head)
{
	head->prev = head->next = head;
}

static inline bool tcp_list_empty(const struct tcp_link *head)
{
	return head->next == head;
}

static inline void tcp_list_add_tail(struct tcp_link *head, struct tcp_link *l)
{
	l->prev = head->prev;
	l->next = head;
	head->prev->next = l;
	head->prev = l;
}

static inline void tcp_list_del(struct tcp_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->prev = l->next = l;
}

/* ---- objects ---- */

#define TCP_CHUNK_SLOTS 4 /* data sends per socket whose source the kernel may still read */
#define TCP_PENDING 1	  /* a transfer's status while undecided */

/* A transfer, either direction. */
struct tcp_xfer {
	struct tcp_link link;		/* ep->rx_xfers / tx_xfers, then ep->ready / draining */
	struct ferry__tcp_ep *ep;	/* owner */
	struct ferry__loop_timer timer; /* op_timeout_ms deadline */
	uint64_t id;			/* the caller's transfer id */
	uint8_t *buf;			/* destination (rx) or source (tx, never written) */
	size_t len;			/* bytes in the transfer */
	size_t next;			/* tx: offset of the next chunk to hand to a socket */
	size_t done;			/* bytes landed (rx) or sent and released (tx) */
	unsigned inflight;		/* kernel requests using buf now */
	int status;			/* TCP_PENDING, then the result */
	bool rx;			/* direction */
	bool in_table;			/* rx: in ep->expects */
	ferry__tcp_xfer_cb cb;		/* completion */
	void *arg;			/* its argument */
};

/* One data frame being sent: header + a piece of a transfer's source. */
struct tcp_chunk {
	struct tcp_sock *sock;	    /* owner */
	struct tcp_xfer *xfer;	    /* NULL when the slot is free */
	struct ferry__loop_req req; /* its send (zero-copy: final after the notification) */
	struct msghdr msg;	    /* header + payload */
	struct iovec iov[2];	    /* the two pieces, advanced on partial sends */
	uint8_t hdr[FERRY__TCP_DATA_HDR_SIZE]; /* the frame header and DataChunk struct */
	size_t len;			       /* payload bytes */
	bool sending;			       /* the send stage is not over (the socket is busy) */
	bool zc;			       /* sent with SEND_ZC */
};

/* A queued control frame (MSG, HELLO or ACK): header and payload in one allocation. */
struct tcp_msg {
	struct tcp_msg *next; /* queue link */
	size_t size;	      /* header + payload */
	size_t done;	      /* bytes written */
	bool counted;	      /* in its endpoint's tx_queued */
	uint8_t data[];	      /* the frame */
};

enum tcp_rx_state {
	RX_IDLE,  /* no receive armed */
	RX_HDR,	  /* reading a header into sock->hdr */
	RX_DHDR,  /* reading a DataChunk struct into sock->hdr after the header */
	RX_MSG,	  /* reading a MSG payload into ep->msg_buf */
	RX_DATA,  /* reading a DATA payload into the transfer's buffer */
	RX_DRAIN, /* reading a payload nobody wants into the context's scratch */
	RX_HELLO, /* handshake: reading a HELLO (listener) or ACK payload into sock->hello */
};

/* One socket: of an endpoint, or accepted and waiting for its HELLO (ep NULL). */
struct tcp_sock {
	struct tcp_link link;		      /* listener->pending while ep is NULL */
	struct ferry__tcp_ep *ep;	      /* owner once joined (or from connect) */
	struct ferry__tcp_listener *listener; /* accepted: until joined */
	struct ferry__tcp_ctx *ctx;	      /* the context */
	int fd;				      /* -1 once closed */
	unsigned index;			      /* position in the endpoint */
	struct ferry__loop_req rx_req;	      /* the one receive */
	struct ferry__loop_req tx_req;	      /* control frame send */
	struct ferry__loop_req connect_req;   /* connect */
	struct ferry__loop_timer timer;	      /* accepted: HELLO deadline */
	/* receive */
	enum tcp_rx_state rx_state;	       /* what the pending receive reads */
	uint8_t hdr[FERRY__TCP_DATA_HDR_SIZE]; /* header (and DataChunk struct) being read */
	size_t rx_got;			       /* bytes of the current piece read */
	size_t rx_want;			       /* bytes of the current piece */
	struct ferry__tcp_hdr rx_hdr;	       /* decoded header of the payload being read */
	struct tcp_xfer *rx_xfer;	       /* RX_DATA: the destination transfer */
	uint8_t *hello;			       /* RX_HELLO: the handshake payload read so far */
	/* send */
	struct tcp_msg *msg_head;		  /* control frames queued (socket 0, handshake) */
	struct tcp_msg **msg_tail;		  /* where the next one goes */
	struct tcp_msg *msg_busy;		  /* the one being sent */
	struct tcp_chunk chunks[TCP_CHUNK_SLOTS]; /* data frames in flight */
	bool tx_busy;				  /* a send stage is running (ordering) */
	bool acked;				  /* connect: our HELLO was accepted */
	bool refusing;				  /* accepted: close once the refusal is sent */
	bool shut;				  /* shutdown(2) done */
	bool polled;				  /* on ctx->polled: receive by ferry__tcp_poll */
	struct tcp_link poll_link;		  /* ctx->polled */
	uint64_t polled_since_ns;		  /* when it last went on the list */
};

enum tcp_ep_state {
	EP_CONNECTING, /* connect: sockets connecting, HELLOs out, waiting for every ACK */
	EP_FORMING,    /* listener: waiting for the other sockets of this nonce */
	EP_OPEN,       /* established */
	EP_FAILED,     /* torn down: finishing transfers, closing sockets */
};

struct ferry__tcp_ep {
	struct tcp_link link;		      /* ctx->eps, or listener->forming */
	struct ferry__tcp_ctx *ctx;	      /* the context */
	struct ferry__tcp_listener *listener; /* EP_FORMING: the listener that owns it */
	struct ferry__tcp_ep_cbs cbs;	      /* callbacks (copied) */
	void *arg;			      /* their argument */
	enum tcp_ep_state state;	      /* see enum */
	int reason;			      /* EP_FAILED: why */
	uint64_t nonce;			      /* groups the sockets at the listener */
	unsigned nsocks;		      /* sockets */
	unsigned joined;		      /* FORMING: sockets joined; CONNECTING: ACKs */
	unsigned busy;			      /* nesting of our entry points: no free inside */
	unsigned timeout_ms;		      /* connect/forming deadline, for the log */
	bool reported;			      /* on_connect(0) was delivered: on_close is due */
	bool notified;			      /* the final on_connect/on_close was delivered */
	bool destroyed;			      /* the owner let go: free when quiet */
	bool no_zc;			      /* SEND_ZC unsupported here (Unix sockets) */
	struct ferry__loop_timer timer;	      /* connect/forming deadline */
	struct ferry__loop_timer kick;	      /* runs deferred work on the next pass */
	struct ferry__loop_timer stall;	      /* control frames past max_queued too long */
	size_t tx_queued;		      /* control frame bytes queued, not yet sent */
	bool rx_held;			      /* socket 0 not read: tx_queued past the cap */
	struct ferry__hashmap expects;	      /* xfer id -> struct tcp_xfer * */
	struct tcp_link rx_xfers;	      /* expected transfers */
	struct tcp_link tx_xfers;	      /* transfers being sent, in order */
	struct tcp_link ready;		      /* decided, nothing in flight: callback due */
	struct tcp_link draining;	      /* decided, waiting for kernel requests */
	unsigned next_tx_sock;		      /* round robin start for kicking sockets */
	uint8_t *msg_buf;		      /* MSG frame being received (header + payload) */
	size_t msg_cap;			      /* its size */
	struct sockaddr_storage addr;	      /* connect: the peer */
	socklen_t addr_len;		      /* its length */
	char peer[64];			      /* the peer as text, for logs */
	struct tcp_sock *socks[];	      /* nsocks sockets (NULL until joined) */
};

struct ferry__tcp_listener {
	struct tcp_link link;		   /* ctx->listeners */
	struct ferry__tcp_ctx *ctx;	   /* the context */
	struct ferry__tcp_ep_cbs cbs;	   /* for accepted endpoints */
	void *arg;			   /* their argument */
	int fd;				   /* listening socket, -1 once closed */
	uint16_t port;			   /* bound port */
	bool destroyed;			   /* waiting for the accept to end */
	bool busy;			   /* inside listener_destroy(): not freed meanwhile */
	struct ferry__loop_req accept_req; /* multishot accept */
	struct tcp_link pending;	   /* accepted sockets waiting for HELLO */
	struct tcp_link forming;	   /* endpoints not complete yet */
};

struct ferry__tcp_ctx {
	struct ferry__loop *loop;    /* everything runs on it */
	uint8_t *token;		     /* copy of the token */
	size_t token_size;	     /* its length */
	uint32_t conns_per_peer;     /* sockets per connecting endpoint */
	uint32_t chunk_size;	     /* DATA payload per frame */
	uint32_t zc_threshold;	     /* SEND_ZC from this chunk size */
	uint32_t max_msg;	     /* largest MSG */
	uint32_t connect_timeout_ms; /* handshake deadline */
	uint32_t op_timeout_ms;	     /* transfer deadline */
	size_t max_queued;	     /* tx_queued that holds reading back, SIZE_MAX = none */
	uint32_t stall_timeout_ms;   /* over it this long fails the endpoint, 0 = never */
	int sock_buf_bytes;	     /* SO_SNDBUF/SO_RCVBUF, 0 = kernel autotuning */
	uint32_t flags;		     /* FERRY__TCP_* */
	uint8_t *scratch;	     /* payloads nobody expects land here */
	struct tcp_link eps;	     /* endpoints not forming */
	struct tcp_link listeners;   /* listeners, live and dying */
	unsigned live;		     /* eps + listeners + pending sockets not yet freed */
	bool destroyed;		     /* freed by the last of them */
	uint64_t poll_ns;	     /* opts.poll_us; 0 = every receive armed in the ring */
	struct tcp_link polled;	     /* sockets whose receive ferry__tcp_poll() does */
};

#define TCP_SCRATCH_SIZE (64u << 10)

/* ---- tcp.c ---- */
void ferry__tcp_ep_fail(struct ferry__tcp_ep *ep, int reason);
void ferry__tcp_ep_settle(struct ferry__tcp_ep *ep);
void ferry__tcp_ep_kick(struct ferry__tcp_ep *ep);
void ferry__tcp_sock_shut(struct tcp_sock *sock);
/* tcp.c: a receive on a socket that has no endpoint (HELLO) or is connecting (ACK) ended. */
void ferry__tcp_handshake_rx(struct tcp_sock *sock, int result);
void ferry__tcp_handshake_tx_done(struct tcp_sock *sock);

/* ---- tcp_wire.c: the handshake's frame-level steps (the rest is in tcp.c) ---- */
/* Does @t equal the context's token? Constant time in the token's content. */
bool ferry__tcp_token_equal(const struct ferry__tcp_ctx *ctx, const uint8_t *t, size_t len);
/* Queue the TransferHandshakeReply with @status on @sock. 0, -ENOMEM. */
int ferry__tcp_queue_ack(struct tcp_sock *sock, int status);
/* A handshake frame's header is in sock->hdr: see tcp_wire.c. 1, 0 or -errno. */
int ferry__tcp_handshake_hdr(struct tcp_sock *sock, uint8_t kind);
/* Why ferry__tcp_handshake_hdr() refused a frame, for the log. */
const char *ferry__tcp_handshake_why(int err);

/* ---- tcp_io.c ---- */
/* Arm the receive of the next header. 0 or -errno (the caller fails the endpoint). */
int ferry__tcp_rx_arm_hdr(struct tcp_sock *sock);
/* Re-arm the receive of the rest of the current piece. 0 or -errno. */
int ferry__tcp_rx_resume(struct tcp_sock *sock);
/* Queue a copy of a whole frame (header included) on @sock and start sending. 0, -ENOMEM. */
int ferry__tcp_queue_frame(struct tcp_sock *sock, const void *frame, size_t size);
/* Start sending on every socket that is idle. */
void ferry__tcp_tx_kick_all(struct ferry__tcp_ep *ep);
/* Decide @x with @status: finish now if allowed and nothing is in flight, else defer. */
void ferry__tcp_xfer_decide(struct tcp_xfer *x, int status);
/* Finish every transfer on ep->ready (callbacks run). */
void ferry__tcp_run_ready(struct ferry__tcp_ep *ep);
/* Take @sock off the polled list (ferry__tcp_poll), if it is on it. */
void ferry__tcp_sock_unpoll(struct tcp_sock *sock);
/* Free queued control frames and the receive buffers of a socket. */
void ferry__tcp_sock_release(struct tcp_sock *sock);
/* True when no kernel request of @sock is pending (chunk notifications included). */
bool ferry__tcp_sock_quiet(const struct tcp_sock *sock);
/* True when no send stage, receive or connect is pending: the fd may be closed. */
bool ferry__tcp_sock_closable(const struct tcp_sock *sock);

/*
 * ferry__tcp_ep_adopt() - an established endpoint over @n already connected stream sockets
 * (socket i has index i), without a handshake: for tests and the fuzz target. Takes the fds on
 * success. No on_connect is called; on_close follows when it fails. Returns 0, -EINVAL, -ENOMEM.
 */
int ferry__tcp_ep_adopt(struct ferry__tcp_ctx *ctx, const int *fds, unsigned n,
			const struct ferry__tcp_ep_cbs *cbs, void *arg, struct ferry__tcp_ep **out);

/* ferry__tcp_ep_socks() - sockets in the endpoint (tests). */
unsigned ferry__tcp_ep_socks(const struct ferry__tcp_ep *ep);

#endif
