/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Private state of framed connections, shared by conn.c (the connection: receive, send, close)
 * and conn_server.c (listen, accept, handshake). Nothing else includes it.
 */
#ifndef FERRY_COMMON_CONN_INT_H
#define FERRY_COMMON_CONN_INT_H

#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/conn.h"
#include "common/frame.h"
#include "common/loop.h"

#define CONN_LOG "conn"
#define CONN_TX_IOV 32	       /* iovecs per gathered sendmsg: 16 small messages */
#define CONN_FD_BATCHES 4      /* reads with fds whose message has not been parsed yet */
#define CONN_PACK_BYTES 16384u /* small copied messages are packed into chunks this big */
#define CONN_PACK_MAX 2048u    /* largest payload that is packed */

enum conn_state {
	CONN_CONNECTING, /* connect in flight; sends are queued */
	CONN_HANDSHAKE,	 /* client: waiting for the HandshakeReply; server: for the Handshake */
	CONN_OPEN,	 /* messages flow */
	CONN_FLUSHING,	 /* nothing delivered; sending what is queued, then a graceful close */
	CONN_CLOSING,	 /* waiting for requests, then close(2), then on_close */
};

union conn_cmsg {
	char buf[CMSG_SPACE(sizeof(int) * FERRY_CONN_MAX_FDS)]; /* SCM_RIGHTS */
	size_t align; /* cmsghdr alignment (struct cmsghdr has a flexible array) */
};

/* One queued message: its header and (copied or borrowed) payload, written in order. */
struct conn_tx {
	struct conn_tx *next;			 /* queue link */
	struct ferry__conn *conn;		 /* owner */
	struct ferry__loop_req zc_req;		 /* its zero-copy send (one at most) */
	struct msghdr zc_msg;			 /* the zero-copy sendmsg */
	struct iovec zc_iov[2];			 /* header, payload */
	const uint8_t *payload;			 /* data[] or the caller's buffer */
	size_t len;				 /* payload bytes */
	size_t done;				 /* bytes of header + payload written */
	void (*done_cb)(void *arg, int status);	 /* borrowed payload: release it */
	void *done_arg;				 /* its argument */
	int fds[FERRY_CONN_MAX_FDS];		 /* duplicates to send with the first byte */
	unsigned nfds;				 /* entries in fds (0 once sent) */
	bool zc;				 /* goes out with SENDMSG_ZC */
	bool queued;				 /* still in the conn's queue */
	bool packed;				 /* data[] holds whole frames, header unused */
	uint8_t header[FERRY_FRAME_HEADER_SIZE]; /* the frame header */
	uint8_t data[];				 /* the copied payload */
};

/* File descriptors that came with one read: they belong to the last frame starting in it. */
struct conn_fd_batch {
	uint64_t start;		     /* stream offset of the read's first byte */
	uint64_t end;		     /* stream offset one past its last */
	int fds[FERRY_CONN_MAX_FDS]; /* received fds */
	unsigned nfds;		     /* entries in fds */
};

struct ferry__conn {
	struct ferry__loop *loop;		/* the loop it lives on */
	const struct ferry__conn_callbacks *cb; /* the user's; NULL while a server owns it */
	void *data;				/* the user's */
	struct ferry__conn_server *server;	/* accepting server until the handshake passes */
	struct ferry__conn *srv_prev;		/* in the server's list of handshaking conns */
	struct ferry__conn *srv_next;		/* same */
	int fd;					/* the socket, -1 once handed to close */
	int family;				/* AF_UNIX, AF_INET or AF_INET6 */
	enum conn_state state;			/* see enum conn_state */
	int close_err;				/* what on_close reports */
	bool client_handshake;			/* we sent a Handshake and expect its reply */
	bool notify_connect;			/* the timer's next run calls on_connect */
	bool stream_up;				/* the socket connected (or was accepted) */
	bool framed;				/* a verified frame came from the peer */
	char peer[80];				/* for logs */
	uint32_t max_message;			/* largest payload in either direction */
	size_t zc_min;				/* smallest payload sent with SEND_ZC */
	unsigned timeout_ms;			/* connect / handshake deadline */
	size_t tx_pause;			/* max_queued_bytes, SIZE_MAX = none */
	size_t tx_max;				/* a send past this closes, SIZE_MAX = none */
	unsigned stall_ms;			/* stall_timeout_ms, 0 = never */
	unsigned frame_ms;			/* frame_timeout_ms, 0 = never */
	bool rx_paused;				/* delivery held back by tx_pause */
	struct ferry__loop_timer stall_timer;	/* the queue is past tx_pause */
	struct ferry__loop_timer frame_timer;	/* a frame is half received */
	uint64_t rx_progress_ms;		/* last read while a frame was half in */
	struct ferry__loop_timer timer;		/* deadlines, deferred on_connect, close kick */
	struct ferry__loop_req connect_req;	/* connect in flight */
	struct sockaddr_storage addr;		/* connect target (read by the kernel) */
	socklen_t addr_len;			/* its length */
	struct ferry__loop_req close_req;	/* close(2) in flight */
	/* receive */
	struct ferry__frame_parser parser;	       /* reassembles frames */
	struct ferry__loop_req rx_req;		       /* recv/recvmsg in flight */
	struct msghdr rx_msg;			       /* Unix: recvmsg */
	struct iovec rx_iov;			       /* the parser's free space */
	union conn_cmsg rx_cmsg;		       /* Unix: received SCM_RIGHTS */
	uint64_t rx_total;			       /* bytes received so far */
	uint64_t rx_frame_at;			       /* stream offset of the next frame */
	struct conn_fd_batch batches[CONN_FD_BATCHES]; /* fds waiting for their frame */
	unsigned nbatches;			       /* entries in batches */
	int msg_fds[FERRY_CONN_MAX_FDS];	       /* fds of the message being delivered */
	unsigned msg_nfds;			       /* entries in msg_fds */
	unsigned msg_fd_next;			       /* next for ferry__conn_take_fd() */
	/* send */
	struct conn_tx *tx_head;	   /* queue, oldest first */
	struct conn_tx **tx_tail;	   /* where the next message is linked */
	struct conn_tx *tx_last;	   /* the newest queued message, NULL when none */
	struct conn_tx *tx_spare;	   /* a sent pack chunk kept for the next, or NULL */
	struct ferry__loop_timer tx_timer; /* kicks the send once per loop pass */
	size_t tx_bytes;		   /* header + payload bytes queued, not written */
	size_t tx_high;			   /* the most tx_bytes ever were */
	bool tx_busy;			  /* a send is in flight (or a zc send awaits its result) */
	struct conn_tx *tx_zc;		  /* the message whose zc send awaits its result */
	unsigned zc_outstanding;	  /* zc sends whose notification has not come */
	struct ferry__loop_req tx_req;	  /* gathered sendmsg in flight */
	struct msghdr tx_msg;		  /* its header */
	struct iovec tx_iov[CONN_TX_IOV]; /* its iovecs */
	union conn_cmsg tx_cmsg;	  /* its SCM_RIGHTS */
};

static inline void ferry__conn_close_fds(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

/* conn.c, for conn_rx.c: close with @err (async); progress a close (true: freed) */
void ferry__conn_abort(struct ferry__conn *conn, int err);
bool ferry__conn_finalize(struct ferry__conn *conn);

/* conn_rx.c, for conn.c: keep one receive pending (0 or -errno); deliver what was held back
 * by backpressure and read on */
int ferry__conn_rx_arm(struct ferry__conn *conn);
void ferry__conn_rx_resume(struct ferry__conn *conn);
/* conn.c, for conn_rx.c: arm or stop the mid-frame deadline after a read */
void ferry__conn_frame_deadline(struct ferry__conn *conn);
/* conn.c: apply the limits of @opts (@server: accepted, zeros mean the server defaults) */
void ferry__conn_set_limits(struct ferry__conn *conn, const struct ferry__conn_opts *opts,
			    bool server);

/* conn.c, for the server */
int ferry__conn_new(struct ferry__loop *loop, const struct ferry__conn_opts *opts, int fd,
		    struct ferry__conn **out);
void ferry__conn_begin(struct ferry__conn *conn, bool handshake);
void ferry__conn_accepted(struct ferry__conn *conn);
void ferry__conn_flush_close(struct ferry__conn *conn, int err);

/* conn_server.c, for conn.c */
void ferry__conn_server_handshake(struct ferry__conn *conn, uint16_t type, const void *payload,
				  size_t len);
void ferry__conn_server_forget(struct ferry__conn *conn);

#endif
