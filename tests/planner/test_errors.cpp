// SPDX-License-Identifier: MIT
// InputError: the one formatter every front end prints errors with.
#include <catch2/catch.hpp>

#include "planner/errors.h"

using namespace pw::planner;

// #10 item 15: the app wrote "FILE, line N: ..." where the CLI wrote "FILE:N: ...".
TEST_CASE("formatInputError renders the known parts of an error alike everywhere", "[errors]")
{
    CHECK(formatInputError("m.json", 3, "/layers/0/forward_ms", "must be >= 0")
        == "m.json:3: /layers/0/forward_ms: must be >= 0");
    CHECK(formatInputError("m.json", 0, "", "cannot open") == "m.json: cannot open");
    CHECK(formatInputError("", 7, "edge", "unknown node") == "line 7: edge: unknown node");
    CHECK(formatInputError("", 0, "--stages", "must be > 0") == "--stages: must be > 0");
    CHECK(formatInputError("", 0, "", "no plan") == "no plan");
    const InputError e("c.json", 2, "/nodes/0/count", "a node needs at least one device");
    CHECK(formatInputError(e) == "c.json:2: /nodes/0/count: a node needs at least one device");
    CHECK(formatInputError(e) == e.what());
    CHECK(formatInputError(e.inFile("other.json")) == "other.json:2: /nodes/0/count: a node needs at least one device");
}
