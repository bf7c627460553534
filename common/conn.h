/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Framed connections on the io_uring loop: a TCP or Unix stream socket exchanging framed
 * FlatBuffers messages (common/frame.h), each verified (ferry__wire_verify) before the user
 * sees it, with a connection-level handshake, SCM_RIGHTS fd passing on Unix sockets and
 * zero-copy sends for large payloads on TCP. Plus a server helper: listen, accept, handshake.
 *
 * Thread model: a connection and a server belong to their loop's thread; every function here
 * must be called on it (or before the loop runs), and every callback runs on it.
 *
 * Lifetime: a connection exists from a successful connect/open/accept until its on_close
 * callback returns; on_close is called exactly once and is the last callback. Closing is
 * asynchronous: ferry__conn_close() never calls on_close itself. Messages are delivered only
 * while the connection is open; after ferry__conn_close() none are.
 *
 * on_close errors: 0 after ferry__conn_close(); -ECONNRESET the peer closed or reset the
 * connection (also at a frame boundary: a stream has no orderly "goodbye" of its own; a frame cut
 * short is logged); -EPROTO a malformed frame or message, or a handshake breach; -EACCES the
 * server refused our handshake token; -ECONNREFUSED / -ETIMEDOUT / -EHOSTUNREACH ... connect
 * failed; -ENOMEM; -ECANCELED the loop was destroyed.
 */
#ifndef FERRY_COMMON_CONN_H
#define FERRY_COMMON_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/loop.h"
#include "common/wire.h"

/* Most file descriptors one message can carry. */
#define FERRY_CONN_MAX_FDS 8

struct ferry__conn;
struct ferry__conn_server;

struct ferry__conn_callbacks {
	/*
	 * A verified message. @payload is valid only during the call. File descriptors sent with
	 * it are taken with ferry__conn_take_fd(); those left are closed after the call.
	 */
	void (*on_message)(struct ferry__conn *conn, uint16_t type, const void *payload,
			   size_t len);
	/* Optional. The connection is usable: connected, and the handshake done if any.
	 * Not called for connections a server accepted: on_accept is their start. */
	void (*on_connect)(struct ferry__conn *conn);
	/* The last callback; the connection is freed when it returns. See the header comment. */
	void (*on_close)(struct ferry__conn *conn, int err);
};

/*
 * Connection options; zeros are defaults except @cb. Payloads of @zerocopy_min_bytes or more go
 * out with SEND_ZC on TCP (SIZE_MAX: never). A client @handshake is sent first and the
 * connection is up once the server's HandshakeReply accepted it.
 */
struct ferry__conn_opts {
	const struct ferry__conn_callbacks *cb;	       /* required; must outlive the connection */
	void *data;				       /* ferry__conn_data() */
	uint32_t max_message_bytes;		       /* largest payload either way, 0 = 16 MiB */
	size_t zerocopy_min_bytes;		       /* 0 = 64 KiB */
	unsigned connect_timeout_ms;		       /* connect + handshake deadline, 0 = 10 s */
	const struct ferry__wire_handshake *handshake; /* client only; copied; NULL = none */
	/*
	 * Limits against a peer that does not read or stalls mid-frame. Zeros: none for
	 * connect/open; FERRY_CONN_SERVER_DEFAULT_* for accepted connections (SIZE_MAX or
	 * UINT_MAX: none there either). Past @max_queued_bytes unsent, incoming messages are not
	 * delivered (nor read) until the queue drains below it: backpressure on a peer that
	 * pipelines requests and never reads replies. A queue that stays past it for
	 * @stall_timeout_ms, or a send that would take it past 2 x max_queued_bytes +
	 * max_message_bytes, closes the connection (-ETIMEDOUT / -ENOBUFS, logged).
	 */
	size_t max_queued_bytes;   /* see above */
	unsigned stall_timeout_ms; /* see above */
	unsigned frame_timeout_ms; /* a frame begun and no byte for this long: -ETIMEDOUT */
};

/* Defaults of accepted connections' limits (struct ferry__conn_opts, _server_opts). */
#define FERRY_CONN_SERVER_DEFAULT_MAX_QUEUED_BYTES (8u << 20)
#define FERRY_CONN_SERVER_DEFAULT_STALL_TIMEOUT_MS 30000u
#define FERRY_CONN_SERVER_DEFAULT_FRAME_TIMEOUT_MS 30000u
#define FERRY_CONN_SERVER_DEFAULT_HANDSHAKE_MAX_BYTES (16u << 10)
#define FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING 64u
/* Descriptors a server keeps besides its clients and handshakes: stdio, its loop, files and
 * rings (a WAL's), listening sockets, a metrics endpoint and its clients, connections to other
 * servers, refused connections still flushing their reply. */
#define FERRY_CONN_SERVER_FD_RESERVE 64u
/*
 * ferry__conn_server_fd_room() - the clients this process's open-file limit (RLIMIT_NOFILE, as
 * it is now: the daemons raise it first) leaves room for: the limit less
 * FERRY_CONN_SERVER_FD_RESERVE and a descriptor per connection that may wait for its handshake
 * (@max_handshaking, 0 = FERRY_CONN_SERVER_DEFAULT_MAX_HANDSHAKING). A server's default client
 * limit, so that accept never meets EMFILE (ferry-gcs --max-clients, ferry-sched); half the
 * limit when it is too low for the reserve, UINT_MAX when there is none.
 */
unsigned ferry__conn_server_fd_room(unsigned max_handshaking);

/*
 * A server's client limit (ferry-gcs and ferry-sched --max-clients). A client whose handshake
 * passed, when as many are connected as the limit allows, is refused in its HandshakeReply
 * (-EUSERS: its connect fails with that, not a reset), so the descriptors of accepted clients
 * stay under the open-file limit and accept never meets EMFILE, which would lock out every
 * newcomer, a node that reconnects included; connections still in their handshake are capped
 * apart (max_handshaking). The server counts its clients in and out (clients); loop thread.
 */
struct ferry__conn_client_cap {
	unsigned clients;   /* accepted and not yet closed: the server counts them */
	unsigned max;	    /* past it a handshake is refused */
	uint64_t logged_ms; /* the last "at the limit" line, 0: never */
	uint64_t refused;   /* refused since that line */
};
/* The limit: @configured, else (0) ferry__conn_server_fd_room(@max_handshaking); a configured
 * one past that room is kept (the operator may know the reserve is smaller), with a warning
 * under @comp: past the room, accept may meet EMFILE. */
void ferry__conn_client_cap_init(struct ferry__conn_client_cap *cap, unsigned configured,
				 unsigned max_handshaking, const char *comp);
/* For an admit hook: 0, or -EUSERS at the limit, with one line per 10 s under @comp naming the
 * limit, @peer (the latest refused) and how many were refused since the last line. */
int ferry__conn_client_cap_admit(struct ferry__conn_client_cap *cap, const char *peer,
				 const char *comp);

/*
 * ferry__conn_connect_tcp() / ferry__conn_connect_unix() - start connecting. Returns 0 and sets
 * *@out: on_connect or on_close follows. Messages sent before the connection is up are queued.
 * Returns -EINVAL (bad options), -ENOMEM, or a resolution/socket error; no callback then.
 * A host name (not a numeric address) is resolved synchronously.
 */
int ferry__conn_connect_tcp(struct ferry__loop *loop, const char *host, uint16_t port,
			    const struct ferry__conn_opts *opts, struct ferry__conn **out);
int ferry__conn_connect_unix(struct ferry__loop *loop, const char *path,
			     const struct ferry__conn_opts *opts, struct ferry__conn **out);

/*
 * ferry__conn_open() - a connection on @fd, a connected stream socket (a socketpair end, ...).
 * Takes ownership of @fd on success only. on_connect follows (after the handshake, if any).
 */
int ferry__conn_open(struct ferry__loop *loop, int fd, const struct ferry__conn_opts *opts,
		     struct ferry__conn **out);

/*
 * ferry__conn_send() - queue a message; the payload is copied, frames go out in the order
 * queued, partial writes are resumed. Returns 0, -EMSGSIZE (over max_message_bytes), -ENOMEM, or
 * -ENOTCONN when the connection is closing. Delivery is not confirmed: a connection that dies
 * drops what is queued.
 */
int ferry__conn_send(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len);

/*
 * ferry__conn_send_fds() - like ferry__conn_send(), with @nfds (1..FERRY_CONN_MAX_FDS) file
 * descriptors attached (SCM_RIGHTS). Unix sockets only (-EOPNOTSUPP otherwise). The fds are
 * duplicated: the caller keeps and may close its own at once. The receiver gets them with this
 * message through ferry__conn_take_fd().
 */
int ferry__conn_send_fds(struct ferry__conn *conn, uint16_t type, const void *payload, size_t len,
			 const int *fds, unsigned nfds);

/*
 * ferry__conn_send_borrowed() - like ferry__conn_send() without the copy: @payload must stay
 * valid and unchanged until @done(@arg, status) runs: status 0 once the kernel no longer reads it
 * (after the zero-copy notification for large payloads on TCP), or the close error (-ECANCELED
 * for a local close) if the connection closed first. @done runs exactly once if this returns 0,
 * never otherwise, and never from inside this call.
 */
int ferry__conn_send_borrowed(struct ferry__conn *conn, uint16_t type, const void *payload,
			      size_t len, void (*done)(void *arg, int status), void *arg);

/*
 * ferry__conn_flush() - start sending what is queued now instead of at the end of this loop pass
 * (where sends are batched by default). For code that runs from a timer, after which the batch
 * would wait one more pass. No-op when a send is in flight or nothing is queued.
 */
void ferry__conn_flush(struct ferry__conn *conn);

/* ferry__conn_take_fd() - inside on_message: the next fd that came with the message (the caller
 * now owns it), or -ENOENT when there are no more. */
int ferry__conn_take_fd(struct ferry__conn *conn);

/* ferry__conn_close() - close asynchronously: drop what is queued, stop delivering messages,
 * then on_close(conn, 0) from a later callback. No-op when already closing. */
void ferry__conn_close(struct ferry__conn *conn);

/* Change the callbacks and user data (e.g. in the server's on_accept). */
void ferry__conn_set_callbacks(struct ferry__conn *conn, const struct ferry__conn_callbacks *cb,
			       void *data);
void *ferry__conn_data(const struct ferry__conn *conn);
struct ferry__loop *ferry__conn_loop(const struct ferry__conn *conn);
/* The peer as text ("127.0.0.1:4000", a Unix path, "fd 7"), for logs. */
const char *ferry__conn_peer(const struct ferry__conn *conn);
/* Bytes queued and not yet written: a caller can hold back when a peer reads slowly. */
size_t ferry__conn_queued_bytes(const struct ferry__conn *conn);
/* ferry__conn_local_addr() - the local end of the connection (getsockname) into @ss/@len: for
 * a client, the address the kernel chose to reach the peer. 0 or -errno. */
int ferry__conn_local_addr(const struct ferry__conn *conn, struct sockaddr_storage *ss,
			   socklen_t *len);

/* A Unix peer as the kernel knows it (conn_cred.c). */
struct ferry__conn_cred {
	int pid;      /* at connect, in this process's pid namespace; 0: not visible from it */
	unsigned uid; /* effective uid at connect */
	unsigned gid; /* effective gid at connect */
	int pidfd;    /* the peer process (the caller closes it); -1: none to be had */
};

/* ferry__conn_peer_cred() - the peer's credentials (SO_PEERCRED) and a pidfd for it
 * (SO_PEERPIDFD, else pidfd_open()). Returns 0, -EOPNOTSUPP (not a Unix socket) or -errno. */
int ferry__conn_peer_cred(const struct ferry__conn *conn, struct ferry__conn_cred *out);

/*
 * ferry__conn_set_frame_max() - cap the frames read from now on at @max bytes of payload (0:
 * back to max_message_bytes; never above it). A larger header closes the connection (-EPROTO)
 * before anything is allocated for it: for servers whose "handshake" is a message of their own
 * (the plasma store's PlasmaConnect), so that an unauthenticated peer cannot make them hold a
 * 16 MiB buffer.
 */
void ferry__conn_set_frame_max(struct ferry__conn *conn, uint32_t max);

/* True while incoming messages are held back because max_queued_bytes is reached. */
bool ferry__conn_rx_paused(const struct ferry__conn *conn);

/* True until the connection starts closing (ferry__conn_close(), an error, the peer): from
 * then on no message is delivered, and sends fail. For code that delivers a connection's
 * messages that came another way (runtime/ring_conn.c). */
bool ferry__conn_is_open(const struct ferry__conn *conn);

/* How far the peer got, for saying why a connection that never came up failed: a stream that
 * came up but never carried a well-formed frame reached something that is not a Ferry peer
 * (another service on that port), or one that did not answer. */
enum ferry__conn_progress {
	FERRY__CONN_NO_STREAM = 0, /* the socket never connected */
	FERRY__CONN_STREAM = 1,	   /* connected (or accepted); no verified frame from the peer */
	FERRY__CONN_FRAMED = 2,	   /* the peer sent at least one verified frame */
};
enum ferry__conn_progress ferry__conn_progress(const struct ferry__conn *conn);

/* ---- server ---- */

/* Server options; zeros are defaults except the callbacks. */
struct ferry__conn_server_opts {
	struct ferry__conn_opts conn; /* for accepted connections (cb may be set in on_accept) */
	/*
	 * A connection passed its handshake (@handshake: its verified Handshake payload, NULL with
	 * FERRY_CONN_SERVER_NO_HANDSHAKE) and got its HandshakeReply. It starts with conn.cb and
	 * conn.data; set others with ferry__conn_set_callbacks() or close it here.
	 */
	void (*on_accept)(struct ferry__conn_server *server, struct ferry__conn *conn,
			  const void *handshake, size_t len);
	/* Optional: a connection was refused before on_accept (-EACCES wrong token, -EPROTO
	 * malformed or not a Handshake, -ETIMEDOUT no handshake in time, or its I/O error). */
	void (*on_refused)(struct ferry__conn_server *server, int err);
	/*
	 * Optional: check a Handshake instead of ferry__wire_check_handshake() against @token and
	 * FERRY_WIRE_PROTOCOL_VERSION. Returns 0, or -EACCES / -EPROTO to refuse.
	 */
	int (*check_handshake)(struct ferry__conn_server *server, const void *payload, size_t len);
	/*
	 * Optional: admit a connection whose Handshake passed, before its HandshakeReply. Returns
	 * 0, or a -errno (-EUSERS: the server holds as many clients as it may) that refuses it as
	 * a wrong token is refused: the HandshakeReply carries it (the client's connection closes
	 * with it), then the connection closes and on_refused reports it. The server logs nothing
	 * of its own about such a refusal: the hook does, rate-limited as it sees fit.
	 */
	int (*admit)(struct ferry__conn_server *server, struct ferry__conn *conn);
	void *data;				/* ferry__conn_server_data() */
	const void *token;			/* cluster token a Handshake must carry (copied) */
	size_t token_len;			/* its bytes */
	uint8_t server_kind;			/* PeerKind sent in the HandshakeReply */
	struct ferry__wire_unique_id server_id; /* sent in the HandshakeReply */
	unsigned handshake_timeout_ms;		/* 0 = 10 s */
	uint32_t handshake_max_bytes;		/* largest frame before the handshake, 0 = 16 KiB */
	unsigned max_handshaking; /* connections in their handshake at once, 0 = 64; a new one
				     past it closes the oldest (a flood cannot lock others out) */
	unsigned bind_retry_ms;	  /* retry a bind that finds the address in use, 0 = no retry */
	int backlog;		  /* listen(2) backlog, 0 = SOMAXCONN */
	unsigned flags;		  /* FERRY_CONN_SERVER_* */
};

/* Accepted connections skip the handshake: on_accept right after accept. */
#define FERRY_CONN_SERVER_NO_HANDSHAKE (1u << 0)

/*
 * ferry__conn_server_listen_tcp() / _unix() - listen and accept until closed. Port 0 picks a
 * free port (ferry__conn_server_port()). A Unix path left by a dead server is replaced, and
 * removed again at close. Returns 0 and *@out, or -EINVAL, -ENOMEM, -EADDRINUSE, ...
 */
int ferry__conn_server_listen_tcp(struct ferry__loop *loop, const char *host, uint16_t port,
				  const struct ferry__conn_server_opts *opts,
				  struct ferry__conn_server **out);
int ferry__conn_server_listen_unix(struct ferry__loop *loop, const char *path,
				   const struct ferry__conn_server_opts *opts,
				   struct ferry__conn_server **out);

/* The bound TCP port (0 for a Unix server). */
uint16_t ferry__conn_server_port(const struct ferry__conn_server *server);
void *ferry__conn_server_data(const struct ferry__conn_server *server);

/*
 * ferry__conn_server_close() - stop accepting and free the server asynchronously (connections
 * still in their handshake are closed; accepted ones live on). If the loop is destroyed first,
 * destroy frees the server. NULL is a no-op.
 */
void ferry__conn_server_close(struct ferry__conn_server *server);

#endif
