/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `ferry status`'s resource lines: each node's load report (available/total per resource, queue
 * length) under its row, and the cluster's sums over the live nodes that reported.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <ferry/gcs.h>

#include "node/resources.h"
#include "tools/ferry_cli.h"
#include "transport/objmgr.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Distinct resource names summed for the cluster line. */
#define MAX_NAMES 256

struct sum {
	const char *name; /* borrowed from the load list */
	int64_t total;	  /* fixed point */
	int64_t available;
};

static bool is_bytes(const char *name)
{
	return !strcmp(name, "memory") || !strcmp(name, "object_store_memory");
}

/* "CPU 1.5/2", "memory 3.2/4.0 GiB", "object store 512/512 MiB" */
static void print_amounts(const char *name, int64_t available, int64_t total, const char *sep)
{
	char a[32], t[32];

	if (is_bytes(name)) {
		double unit = total / FERRY_GCS_RESOURCE_UNIT < GIB ? GIB / 1024 : GIB;

		printf("%s%s %.*f/%.*f %s", sep, strcmp(name, "memory") ? "object store" : name,
		       unit < GIB ? 0 : 1, (double)(available / FERRY_GCS_RESOURCE_UNIT) / unit,
		       unit < GIB ? 0 : 1, (double)(total / FERRY_GCS_RESOURCE_UNIT) / unit,
		       unit < GIB ? "MiB" : "GiB");
		return;
	}
	ferry__res_format_amount(available, a, sizeof(a));
	ferry__res_format_amount(total, t, sizeof(t));
	printf("%s%s %s/%s", sep, name, a, t);
}

const struct ferry_gcs_node_load *ferry__cli_find_load(const struct ferry_gcs_node_load *loads,
						       int count, const struct ferry_node_id *id)
{
	for (int i = 0; i < count; i++)
		if (!memcmp(&loads[i].id, id, sizeof(*id)))
			return &loads[i];
	return NULL;
}

void ferry__cli_print_load(const struct ferry_gcs_node_load *l)
{
	printf("  resources (available/total):");
	for (uint32_t i = 0; i < l->nresources; i++)
		print_amounts(l->resources[i].name, l->resources[i].available,
			      l->resources[i].total, i ? ", " : " ");
	printf("; queue %" PRIu32 "\n", l->queue_length);
	printf("  workers: %" PRIu32 " idle, %" PRIu32 " leased, %" PRIu32 " starting; leases "
	       "queued %" PRIu32 "\n",
	       l->workers_idle, l->workers_leased, l->workers_starting, l->queue_length);
}

static void add(struct sum *sums, unsigned *n, const struct ferry_gcs_resource_load *r)
{
	unsigned i;

	for (i = 0; i < *n && strcmp(sums[i].name, r->name); i++)
		;
	if (i == *n) {
		if (*n == MAX_NAMES)
			return;
		sums[(*n)++] = (struct sum){r->name, 0, 0};
	}
	sums[i].total += r->total;
	sums[i].available += r->available;
}

/* The boot id of the host node @id runs on (its advertised address), or "" if unknown. */
static void host_of(const struct ferry_gcs_node_info *nodes, int nnodes,
		    const struct ferry_node_id *id, char *host, size_t size)
{
	struct ferry__node_addr a;

	*host = '\0';
	for (int i = 0; i < nnodes; i++)
		if (!memcmp(&nodes[i].id, id, sizeof(*id)) && nodes[i].address &&
		    ferry__node_addr_parse(nodes[i].address, strlen(nodes[i].address), &a) == 0)
			snprintf(host, size, "%s", a.host);
}

/* Whether an earlier report than @i's comes from the same host (@hosts[i]). */
static bool host_seen(char (*hosts)[40], int i)
{
	for (int j = 0; j < i; j++)
		if (hosts[i][0] && !strcmp(hosts[j], hosts[i]))
			return true;
	return false;
}

void ferry__cli_print_load_totals(const struct ferry_gcs_node_load *loads, int count,
				  const struct ferry_gcs_node_info *nodes, int nnodes)
{
	static struct sum sums[MAX_NAMES];
	static char hosts[4096][40];
	uint64_t queued = 0;
	unsigned n = 0;
	int reported = 0, alive = 0;

	for (int i = 0; i < nnodes; i++) {
		bool live = nodes[i].state != FERRY_GCS_NODE_DEAD;
		alive += live;
		reported += live && ferry__cli_find_load(loads, count, &nodes[i].id);
	}
	for (int i = 0; i < count; i++) {
		bool same_host = false;
		if (i < (int)(sizeof(hosts) / sizeof(hosts[0]))) {
			host_of(nodes, nnodes, &loads[i].id, hosts[i], sizeof(hosts[i]));
			same_host = host_seen(hosts, i);
		}
		for (uint32_t j = 0; j < loads[i].nresources; j++)
			if (!same_host || strcmp(loads[i].resources[j].name, "memory"))
				add(sums, &n, &loads[i].resources[j]);
		queued += loads[i].queue_length;
	}
	if (!count)
		return;
	printf("cluster (available/total):");
	for (unsigned i = 0; i < n; i++)
		print_amounts(sums[i].name, sums[i].available, sums[i].total, i ? ", " : " ");
	printf("; queue %" PRIu64 "\n", queued);
	if (reported < alive)
		printf("  (%d of %d live nodes reported their load so far: the others are not in "
		       "these sums)\n",
		       reported, alive);
}
