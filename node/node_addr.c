/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which address a node serves on and advertises in the GCS, and the warning when the cluster's
 * nodes advertise addresses that cannot reach each other (see node.h).
 *
 * The default is the local address of the node's connection to the GCS: the kernel picked it
 * to reach the GCS, so on a multi-host cluster it is an address other hosts reach too, and on a
 * one-host cluster (a GCS on 127.0.0.1) it is loopback, which is right there. A host whose
 * route to the GCS has no RDMA device but which has an RDMA interface (IPoIB, RoCE) advertises
 * that one instead when RDMA is wanted: otherwise the node would quietly serve TCP only (TCP
 * then goes over that interface too: the address format has one address for all transports).
 *
 * The object manager listens on the chosen address itself, not on the wildcard: what a node
 * serves is what it advertises, and a listener nobody was told about is not left open on every
 * interface. A wildcard --ip (0.0.0.0, ::, which `ferry start --ip 0.0.0.0` passes on) is
 * taken as "not given": advertising it would send pullers to themselves.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <ferry/gcs.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/net.h"
#include "gcs/client.h"
#include "node/node.h"
#include "transport/objmgr.h"

#define COMP "node"
#define MAX_IFACES 64

/* The entry of @ip in @ifs, or NULL. */
static const struct ferry__net_iface *iface_of(const struct ferry__net_iface *ifs, size_t n,
					       const char *ip)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(ifs[i].ip, ip))
			return &ifs[i];
	return NULL;
}

/* The first address of an interface that is up and carries RDMA, or NULL. */
static const struct ferry__net_iface *iface_rdma(const struct ferry__net_iface *ifs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (ifs[i].rdma && ifs[i].up && !ifs[i].loopback)
			return &ifs[i];
	return NULL;
}

/* --ip as given: an address as is, an interface name as its first address. */
static int pick_given(const char *opt_ip, const struct ferry__net_iface *ifs, size_t n,
		      struct ferry__node_ip_pick *out)
{
	const struct ferry__net_iface *f;

	if (ferry__net_ip_valid(opt_ip)) {
		snprintf(out->ip, sizeof(out->ip), "%s", opt_ip);
		snprintf(out->why, sizeof(out->why), "--ip");
		return 0;
	}
	f = ferry__net_iface_named(ifs, n, opt_ip);
	if (!f) {
		FLOG_ERROR(COMP, "--ip %s: neither an IP address nor an interface that has one",
			   opt_ip);
		return -ENODEV;
	}
	snprintf(out->ip, sizeof(out->ip), "%s", f->ip);
	snprintf(out->why, sizeof(out->why), "--ip: interface %s", f->name);
	return 0;
}

int ferry__node_pick_ip(const char *opt_ip, const char *route_ip, bool want_rdma,
			const struct ferry__net_iface *ifs, size_t n,
			struct ferry__node_ip_pick *out)
{
	const struct ferry__net_iface *route, *rdma;

	memset(out, 0, sizeof(*out));
	if (opt_ip && *opt_ip && !ferry__net_ip_wildcard(opt_ip))
		return pick_given(opt_ip, ifs, n, out);
	if (!route_ip || !ferry__net_ip_valid(route_ip)) {
		snprintf(out->ip, sizeof(out->ip), "127.0.0.1");
		snprintf(out->why, sizeof(out->why), "no address of the GCS connection known");
		return 0;
	}
	snprintf(out->ip, sizeof(out->ip), "%s", route_ip);
	snprintf(out->why, sizeof(out->why), "the address this host reaches the GCS through");
	if (!want_rdma || ferry__net_ip_loopback(route_ip))
		return 0; /* a one-host cluster: RDMA would not be used */
	route = iface_of(ifs, n, route_ip);
	if (route && route->rdma)
		return 0;
	rdma = iface_rdma(ifs, n);
	if (!rdma)
		return 0;
	snprintf(out->ip, sizeof(out->ip), "%s", rdma->ip);
	snprintf(out->why, sizeof(out->why),
		 "RDMA interface %s (the route to the GCS, %s%s, has no RDMA device)", rdma->name,
		 route ? "via " : "", route ? route->name : route_ip);
	return 0;
}

int ferry__node_check_ip(const char *opt_ip)
{
	struct ferry__net_iface *ifs;
	struct ferry__node_ip_pick pick;
	int n, ret;

	if (!opt_ip || !*opt_ip || ferry__net_ip_wildcard(opt_ip) || ferry__net_ip_valid(opt_ip))
		return 0;
	ifs = ferry__calloc(MAX_IFACES, sizeof(*ifs));
	if (!ifs)
		return -ENOMEM;
	n = ferry__net_ifaces("/sys", ifs, MAX_IFACES);
	ret = pick_given(opt_ip, ifs, n < 0 ? 0 : (size_t)n, &pick);
	ferry__free(ifs);
	return ret;
}

int ferry__node_choose_ip(struct ferry_gcs_client *gcs, const struct ferry__node_opts *o, char *ip,
			  size_t size)
{
	struct ferry__net_iface *ifs = ferry__calloc(MAX_IFACES, sizeof(*ifs));
	char route[FERRY__NET_IP_MAX];
	struct ferry__node_ip_pick pick;
	struct sockaddr_storage ss;
	socklen_t len;
	int n, ret;

	if (!ifs)
		return -ENOMEM;
	n = ferry__net_ifaces("/sys", ifs, MAX_IFACES);
	if (n < 0)
		n = 0; /* logged; an address given or the route's still serves */
	ret = ferry__gcs_client_local_addr(gcs, 0, &ss, &len);
	if (ret == 0)
		ret = ferry__net_ip_text((struct sockaddr *)&ss, route, sizeof(route));
	if (ret < 0)
		FLOG_WARN(COMP, "the local address of the GCS connection is unknown (%s)",
			  ferry_strerror(-ret));
	ret = ferry__node_pick_ip(o->ip, ret == 0 ? route : NULL,
				  o->transport != FERRY__NODE_TRANSPORT_TCP, ifs, (size_t)n, &pick);
	ferry__free(ifs);
	if (ret < 0)
		return ret;
	if (o->ip && ferry__net_ip_wildcard(o->ip))
		FLOG_INFO(COMP, "--ip %s: serving on one address, the advertised one", o->ip);
	FLOG_INFO(COMP, "advertising %s: %s", pick.ip, pick.why);
	snprintf(ip, size, "%s", pick.ip);
	return 0;
}

int ferry__node_addr_clash(const struct ferry__node_addr *self,
			   const struct ferry__node_addr *other)
{
	bool self_lo = ferry__net_ip_loopback(self->ip),
	     other_lo = ferry__net_ip_loopback(other->ip);

	/* Nodes on one host reach each other's loopback addresses (and pull over shm). */
	if (!strcmp(self->host, other->host) || self_lo == other_lo)
		return 0;
	return self_lo ? 1 : 2;
}

/* Whether this host reaches the GCS over loopback (a one-host cluster). */
static bool gcs_over_loopback(struct ferry_gcs_client *gcs)
{
	char ip[FERRY__NET_IP_MAX];
	struct sockaddr_storage ss;
	socklen_t len;

	return ferry__gcs_client_local_addr(gcs, 0, &ss, &len) == 0 &&
	       ferry__net_ip_text((struct sockaddr *)&ss, ip, sizeof(ip)) == 0 &&
	       ferry__net_ip_loopback(ip);
}

/* The first live node of @nodes[0..@n) on another host that @self clashes with, or -1. */
static int first_clash(const struct ferry_gcs_node_info *nodes, int n,
		       const struct ferry_node_id *self_id, const struct ferry__node_addr *self,
		       struct ferry__node_addr *other)
{
	for (int i = 0; i < n; i++) {
		const char *text = nodes[i].address ? nodes[i].address : "";

		if (nodes[i].state != FERRY_GCS_NODE_DEAD &&
		    memcmp(&nodes[i].id, self_id, sizeof(*self_id)) &&
		    ferry__node_addr_parse(text, strlen(text), other) == 0 &&
		    ferry__node_addr_clash(self, other) == 1)
			return i;
	}
	return -1;
}

void ferry__node_check_addresses(struct ferry_gcs_client *gcs, const struct ferry_node_id *self_id,
				 const char *address)
{
	struct ferry_gcs_node_info *nodes = NULL;
	struct ferry__node_addr self, other;
	char hex[FERRY_ID_HEX_MAX];
	int n, i;

	/* Only a node that advertises loopback while it reaches the GCS over a network lists the
	 * table (O(nodes)): every node doing it at start would cost the GCS O(nodes^2). */
	if (ferry__node_addr_parse(address, strlen(address), &self) < 0 ||
	    !ferry__net_ip_loopback(self.ip) || gcs_over_loopback(gcs))
		return;
	n = ferry_gcs_node_list(gcs, &nodes);
	if (n < 0) {
		FLOG_INFO(COMP, "cannot list the nodes to check their addresses: %s",
			  ferry_strerror(-n));
		return;
	}
	i = first_clash(nodes, n, self_id, &self, &other);
	if (i >= 0) {
		ferry_node_id_to_hex(&nodes[i].id, hex, sizeof(hex));
		FLOG_WARN(COMP,
			  "this node advertises the loopback address %s, but node %.12s on "
			  "another host advertises %s: that host cannot pull from this node. "
			  "Start it with --ip ADDRESS|INTERFACE, or join the GCS by an address "
			  "the other hosts use",
			  self.ip, hex, other.ip);
	} else {
		FLOG_INFO(COMP,
			  "this node advertises the loopback address %s while it reaches the GCS "
			  "over a network: nodes that join from other hosts will not reach it",
			  self.ip);
	}
	ferry_gcs_free(nodes);
}
