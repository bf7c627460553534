/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in for ferry-worker in the node's runtime tests: it reads the environment the node
 * gives a worker, connects to the node's runtime socket and registers (RuntimeConnect), answers
 * WorkerAssign (failing it when code_path ends in "bad.so"), and serves its listen_path: a
 * PushTask whose function is "exit:N" makes it exit with status N, any other is answered with
 * status 0. It exits 0 when the node closes its connection (with FAKE_WORKER_STUBBORN set it
 * ignores SIGTERM and stays instead).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <ferry/id.h>

#include "tests/integration/node/rt_peer.h"

static struct ferry__fb_builder fb;

static int listen_at(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0) {
		perror("fake_worker: listen");
		exit(10);
	}
	return fd;
}

static int register_with_node(const char *listen_path)
{
	const char *rt = getenv("FERRY_NODE_RUNTIME_SOCKET");
	const char *id_hex = getenv("FERRY_WORKER_ID");
	const char *secret_hex = getenv("FERRY_WORKER_SECRET");
	struct ferry__wire_runtime_connect m = {.protocol_version = FERRY_WIRE_PROTOCOL_VERSION,
						.kind = FERRY__WIRE_PEER_KIND_WORKER};
	uint8_t secret[32];
	struct rtp_frame f;
	int fd;

	if (!rt || !id_hex || !secret_hex || !getenv("FERRY_NODE_STORE_SOCKET") ||
	    ferry_id_from_hex(id_hex, m.id.bytes, sizeof(m.id.bytes)) < 0 ||
	    ferry_id_from_hex(secret_hex, secret, sizeof(secret)) < 0) {
		fprintf(stderr, "fake_worker: the node's environment is missing\n");
		exit(11);
	}
	fd = rtp_connect(rt);
	if (fd < 0)
		exit(12);
	m.secret = secret;
	m.secret_count = sizeof(secret);
	m.pid = (int32_t)getpid();
	m.listen_path = listen_path;
	if (rtp_send(fd, &fb, FERRY__WIRE_MSG_RUNTIME_CONNECT,
		     ferry__wire_runtime_connect_build(&fb, &m)) < 0 ||
	    rtp_recv(fd, &f, 20000) < 0 || f.type != FERRY__WIRE_MSG_RUNTIME_CONNECT_REPLY)
		exit(13);
	if (ferry__wire_runtime_connect_reply_status(
		    ferry__wire_runtime_connect_reply_root_verified(f.payload)) < 0)
		exit(14);
	rtp_frame_free(&f);
	return fd;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = s ? strlen(s) : 0, t = strlen(tail);

	return n >= t && !strcmp(s + n - t, tail);
}

static void answer_assign(int node, const struct rtp_frame *f)
{
	struct ferry__wire_worker_assign_view v =
		ferry__wire_worker_assign_root_verified(f->payload);
	const char *path = ferry__wire_worker_assign_code_path(v);
	struct ferry__wire_worker_assign_reply r = {.job = ferry__wire_worker_assign_job(v)};

	if (ends_with(path, "bad.so")) {
		r.status = -ENOENT;
		r.message = "cannot load bad.so: no such file";
	}
	if (rtp_send(node, &fb, FERRY__WIRE_MSG_WORKER_ASSIGN_REPLY,
		     ferry__wire_worker_assign_reply_build(&fb, &r)) < 0)
		exit(15);
}

/* One owner's connection: RuntimeConnect, then PushTasks. */
static void serve_owner(int fd)
{
	struct rtp_frame f;

	while (rtp_recv(fd, &f, 60000) == 0) {
		if (f.type == FERRY__WIRE_MSG_PUSH_TASK) {
			struct ferry__wire_push_task_view v =
				ferry__wire_push_task_root_verified(f.payload);
			const char *fn = ferry__wire_push_task_function(v);
			struct ferry__wire_push_task_reply r = {
				.task_id = ferry__wire_push_task_task_id(v)};

			if (fn && !strncmp(fn, "exit:", 5)) {
				int status = atoi(fn + 5);

				rtp_frame_free(&f); /* nothing left for a leak checker */
				ferry__fb_builder_fini(&fb);
				exit(status);
			}
			(void)rtp_send(fd, &fb, FERRY__WIRE_MSG_PUSH_TASK_REPLY,
				       ferry__wire_push_task_reply_build(&fb, &r));
		}
		rtp_frame_free(&f);
	}
	close(fd);
}

int main(void)
{
	char listen_path[108];
	struct pollfd pfd[2];
	int node;

	snprintf(listen_path, sizeof(listen_path), "%s.w%d", getenv("FERRY_NODE_RUNTIME_SOCKET"),
		 (int)getpid());
	/* FAKE_WORKER_STUBBORN: ignore SIGTERM and stay after the node hangs up (stop's SIGKILL). */
	if (getenv("FAKE_WORKER_STUBBORN"))
		signal(SIGTERM, SIG_IGN);
	pfd[1].fd = listen_at(listen_path);
	node = register_with_node(listen_path);
	pfd[0].fd = node;
	pfd[0].events = pfd[1].events = POLLIN;
	for (;;) {
		struct rtp_frame f;

		if (poll(pfd, 2, -1) < 0)
			continue;
		if (pfd[1].revents & POLLIN) {
			int c = accept4(pfd[1].fd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0)
				serve_owner(c); /* one at a time: enough for the tests */
		}
		if (!(pfd[0].revents & (POLLIN | POLLHUP)))
			continue;
		if (rtp_recv(node, &f, 20000) < 0 && getenv("FAKE_WORKER_STUBBORN"))
			for (;;)
				pause();
		if (!f.payload)
			break; /* the node closed: leave */
		if (f.type == FERRY__WIRE_MSG_WORKER_ASSIGN)
			answer_assign(node, &f);
		rtp_frame_free(&f);
	}
	unlink(listen_path);
	return 0;
}
