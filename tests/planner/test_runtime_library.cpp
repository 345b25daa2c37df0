// SPDX-License-Identifier: MIT
// RuntimeLibrary (planner/runtime_library.h), the one loader of the libraries mapped only where they are needed:
// a library that is there gives its functions, and what is missing is said with the caller's hint.
#include <catch2/catch.hpp>

#include <cstring>

#include "planner/runtime_library.h"

using Catch::Contains;
using pw::planner::RuntimeLibrary;

TEST_CASE("runtime library: the C library's functions are found and called", "[runtime-library]")
{
    RuntimeLibrary libc("libc.so.6", "no C library");
    std::size_t (*length)(const char*) = nullptr;
    libc.find(length, "strlen");
    REQUIRE(libc.ok());
    REQUIRE(length);
    CHECK(length("pipewright") == 10);
    CHECK(libc.error().empty());
}

TEST_CASE("runtime library: a missing library or symbol is named with the caller's hint", "[runtime-library]")
{
    RuntimeLibrary missing("libpw-no-such-library.so.7", "install it (Debian: apt install nothing)");
    int (*fn)() = nullptr;
    missing.find(fn, "anything");
    CHECK_FALSE(missing.ok());
    CHECK(fn == nullptr);
    CHECK_THAT(missing.error(),
        Contains("libpw-no-such-library.so.7 could not be loaded (") && Contains("): install it (Debian"));

    RuntimeLibrary old("libc.so.6", "no C library", "glibc 99 is needed");
    std::size_t (*length)(const char*) = nullptr;
    old.find(fn, "pw_no_such_symbol");
    old.find(length, "strlen"); // the first failure is the one kept
    CHECK(fn == nullptr);
    CHECK(length != nullptr);
    CHECK_FALSE(old.ok());
    CHECK(old.error() == "libc.so.6 has no pw_no_such_symbol: glibc 99 is needed");
}
