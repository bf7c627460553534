/* SPDX-License-Identifier: Apache-2.0 */
/* The wire fuzz target's entry point, and what it saw (for the corpus replay's checks). */
#ifndef FERRY_TEST_FUZZ_WIRE_H
#define FERRY_TEST_FUZZ_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_replay.h"

/* Nonzero for each message type of which at least one frame verified. */
extern uint8_t fuzz_wire_verified[65536];

#endif
