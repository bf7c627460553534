/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cluster token file, read the same way by every program (ferry-gcs, ferry-node, the ferry
 * command, ferry-bench), so a token one of them accepts is accepted by all.
 *
 * Thread model: thread-safe (no shared state).
 */
#ifndef FERRY_COMMON_TOKEN_H
#define FERRY_COMMON_TOKEN_H

#include <stddef.h>

/* Longest token: the object manager carries it in its node-to-node handshakes. */
#define FERRY_TOKEN_MAX 256

/*
 * ferry__token_read() - the token in the file at @path into @buf (@size >= FERRY_TOKEN_MAX):
 * its bytes with one trailing newline dropped. Returns the token's length (> 0),
 * -errno from open/read, -EINVAL for an empty file, -E2BIG for one longer than FERRY_TOKEN_MAX
 * (never cut short: a cut token would be refused later as a wrong one). Logs why it failed.
 */
int ferry__token_read(const char *path, void *buf, size_t size);

#endif
