/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one corpus-replay driver (replay.c) and the hooks a fuzz target may give it: a check run
 * after the whole corpus (e.g. "every message type had a valid seed"), and a seed writer for
 * `--make-corpus DIR`. Both are optional: replay.c has weak defaults.
 */
#ifndef FERRY_TEST_FUZZ_REPLAY_H
#define FERRY_TEST_FUZZ_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* After every input ran: 0, or nonzero (and a message on stderr) to fail the replay. */
int fuzz_replay_check(void);

/* Write the target's seed corpus into @dir: 0 or nonzero. */
int fuzz_make_corpus(const char *dir);

/* For seed writers: @dir/@name holds @prefix (@prefix_len bytes: a target's input kind, or
 * none) then @len bytes of @bytes. 0, or nonzero after a message on stderr. */
int fuzz_write_seed(const char *dir, const char *name, const void *prefix, size_t prefix_len,
		    const void *bytes, size_t len);

/* For targets whose first input byte picks the message type: that byte into *@kind, and an
 * aligned copy of exactly the rest (*@len bytes; free() it), so ASan sees any read past the
 * payload. NULL for an empty input or no memory. */
static inline uint8_t *fuzz_typed_payload(const uint8_t *data, size_t size, uint8_t *kind,
					  size_t *len)
{
	uint8_t *copy;

	if (!size)
		return NULL;
	copy = malloc(size - 1 ? size - 1 : 1);
	if (!copy)
		return NULL;
	memcpy(copy, data + 1, size - 1);
	*kind = data[0];
	*len = size - 1;
	return copy;
}

#endif
