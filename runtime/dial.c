/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dialing a runtime endpoint (dial.h): Unix on this host, TCP with the cluster token across
 * hosts. The token and the boot id are set once per process before its loop runs and only read
 * after, so they need no lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/token.h"
#include "common/wire.h"
#include "runtime/dial.h"
#include "transport/objmgr.h"

#define COMP "runtime"

static uint8_t dial_token[FERRY_TOKEN_MAX];
static size_t dial_token_len;
static char dial_host[40];

int ferry__rt_dial_setup(const void *token, size_t len)
{
	if (len > sizeof(dial_token) || (len && !token))
		return -EINVAL;
	if (len)
		memcpy(dial_token, token, len);
	dial_token_len = len;
	/* Without a boot id every endpoint counts as this host's (Unix where it has a path). */
	if (ferry__host_boot_id(dial_host, sizeof(dial_host)) < 0) {
		FLOG_WARN(COMP, "no boot id: endpoints are taken as this host's");
		dial_host[0] = '\0';
	}
	return 0;
}

bool ferry__rt_force_tcp(void)
{
	const char *v = getenv("FERRY_RT_TRANSPORT");

	return v && !strcmp(v, "tcp");
}

bool ferry__rt_dial_tcp(const struct ferry__rt_endpoint *ep)
{
	bool elsewhere = ep->host[0] && dial_host[0] && strcmp(ep->host, dial_host) != 0;

	if (!ep->port || !ep->ip[0])
		return false;
	return elsewhere || !ep->path[0] || ferry__rt_force_tcp();
}

int ferry__rt_node_endpoint(const char *node_address, struct ferry__rt_endpoint *out)
{
	struct ferry__node_addr a;
	int n;

	memset(out, 0, sizeof(*out));
	if (!node_address || ferry__node_addr_parse(node_address, strlen(node_address), &a) < 0)
		return -EINVAL;
	if (a.shm_path[0]) {
		n = snprintf(out->path, sizeof(out->path), "%s.rt", a.shm_path);
		if (n < 0 || (size_t)n >= sizeof(out->path))
			out->path[0] = '\0';
	}
	if (a.rt_port) {
		snprintf(out->ip, sizeof(out->ip), "%s", a.ip);
		out->port = a.rt_port;
	}
	snprintf(out->host, sizeof(out->host), "%s", a.host);
	return out->path[0] || out->port ? 0 : -EINVAL;
}

int ferry__rt_dial(struct ferry__loop *loop, const struct ferry__rt_endpoint *ep,
		   const struct ferry__conn_opts *opts, struct ferry__conn **out)
{
	struct ferry__wire_handshake hs = {0};
	struct ferry__conn_opts o = *opts;
	bool elsewhere = ep->host[0] && dial_host[0] && strcmp(ep->host, dial_host) != 0;
	int ret;

	if (!ferry__rt_dial_tcp(ep)) {
		if (elsewhere || !ep->path[0]) {
			FLOG_ERROR(COMP, "endpoint %s on host %s: no TCP port to reach it by",
				   ep->path[0] ? ep->path : ep->ip, ep->host);
			return -EHOSTUNREACH;
		}
		return ferry__conn_connect_unix(loop, ep->path, opts, out);
	}
	hs.protocol_version = FERRY_WIRE_PROTOCOL_VERSION;
	hs.token = dial_token;
	hs.token_count = dial_token_len;
	hs.peer_kind = FERRY__WIRE_PEER_KIND_DRIVER;
	hs.pid = (int32_t)getpid();
	hs.name = "runtime";
	o.handshake = &hs; /* copied by the connect */
	ret = ferry__conn_connect_tcp(loop, ep->ip, ep->port, &o, out);
	FLOG_DEBUG(COMP, "dialing %s:%u (TCP) for %s on host %s: %s", ep->ip, ep->port,
		   ep->path[0] ? ep->path : "an endpoint", ep->host[0] ? ep->host : "?",
		   ret < 0 ? ferry_strerror(ret) : "started");
	return ret < 0 ? ret : 1;
}

int ferry__rt_dial_node(struct ferry__loop *loop, const char *node_address,
			const struct ferry__conn_opts *opts, struct ferry__conn **out)
{
	struct ferry__rt_endpoint ep;
	int ret = ferry__rt_node_endpoint(node_address, &ep);

	if (ret < 0) {
		FLOG_ERROR(COMP, "node address %s: no runtime endpoint in it", node_address);
		return ret;
	}
	return ferry__rt_dial(loop, &ep, opts, out);
}
