/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How often a node heartbeats and how long the GCS waits before declaring it dead, as functions
 * of the cluster's size, so that both sides agree: the GCS counts its alive nodes and sends the
 * count in every heartbeat's reply (GcsBeatInfo), the node sizes its next interval from it (no
 * node follows the whole membership channel: that was N joins x N deliveries at a start).
 *
 * Why: each heartbeat costs the GCS 12-19 us of CPU (a TCP receive and a reply; more in a
 * larger cluster: measured in bench/results-2026-11-27.md). At a fixed 100 ms, 10,000 nodes
 * cost it half a core and more. Past BEATS_PER_S / (1000 / base) nodes the interval grows with
 * N instead, so the whole cluster sends about BEATS_PER_S heartbeats a second, and the deadline
 * stays BEATS_PER_DEADLINE intervals (Ray probes every 3 s and waits for 5 misses). Small
 * clusters keep the configured interval and deadline (100 ms and 1 s by default: up to 400
 * nodes at 100 ms; 1,000 nodes beat every 250 ms with the 1 s deadline; 10,000 nodes every
 * 2.5 s with a 10 s deadline).
 * A node whose process dies is still found at once: its kernel closes the connection (server.c).
 */
#ifndef FERRY_GCS_LIVENESS_H
#define FERRY_GCS_LIVENESS_H

#include <stddef.h>
#include <stdint.h>

#define FERRY__GCS_BEATS_PER_S 4000u	 /* what the GCS is sized to take, cluster-wide */
#define FERRY__GCS_BEATS_PER_DEADLINE 4u /* missed beats before a node is dead, at scale */
#define FERRY__GCS_MAX_BEAT_MS 5000u	 /* past 20,000 nodes the rate grows again */

/* The interval a node of a cluster of @nodes beats at, given its configured @base_ms. */
static inline uint32_t ferry__gcs_beat_interval_ms(uint32_t base_ms, size_t nodes)
{
	uint64_t sized = (uint64_t)nodes * 1000u / FERRY__GCS_BEATS_PER_S;

	if (sized > FERRY__GCS_MAX_BEAT_MS)
		sized = FERRY__GCS_MAX_BEAT_MS;
	return sized > base_ms ? (uint32_t)sized : base_ms;
}

/* The deadline for a cluster of @nodes, given the configured @base_ms. */
static inline uint32_t ferry__gcs_node_deadline_ms(uint32_t base_ms, size_t nodes)
{
	uint64_t sized =
		(uint64_t)FERRY__GCS_BEATS_PER_DEADLINE * ferry__gcs_beat_interval_ms(0, nodes);

	return sized > base_ms ? (uint32_t)sized : base_ms;
}

#endif
