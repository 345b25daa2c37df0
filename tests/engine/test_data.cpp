// SPDX-License-Identifier: MIT
// The data contract (which tokens each microbatch of each step gets) and the synthetic corpus' entropy.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>

#include <unistd.h>

#include "engine/data.h"
#include "engine/llmc.h"
#include "planner/errors.h"

using namespace pw::engine;

TEST_CASE("step k reads the k-th window of m b T + 1 tokens, rows of T, targets shifted", "[engine][data]")
{
    std::vector<std::int32_t> tokens(100);
    std::iota(tokens.begin(), tokens.end(), 0);
    DataOrder order(tokens, 2, 2, 3); // m = 2, b = 2, T = 3: 12 + 1 tokens per step
    std::vector<std::int32_t> in(6), tgt(6);
    order.microbatch(0, 0, in, tgt);
    CHECK(in == std::vector<std::int32_t> {0, 1, 2, 3, 4, 5});
    CHECK(tgt == std::vector<std::int32_t> {1, 2, 3, 4, 5, 6});
    order.microbatch(0, 1, in, tgt);
    CHECK(in == std::vector<std::int32_t> {6, 7, 8, 9, 10, 11});
    CHECK(tgt == std::vector<std::int32_t> {7, 8, 9, 10, 11, 12});
    order.microbatch(1, 0, in, tgt);
    CHECK(in.front() == 13);
    // Step 7 starts at 91: positions past 99 wrap to the start.
    order.microbatch(7, 1, in, tgt);
    CHECK(in == std::vector<std::int32_t> {97, 98, 99, 0, 1, 2});
    CHECK(tgt == std::vector<std::int32_t> {98, 99, 0, 1, 2, 3});
}

TEST_CASE("the Markov corpus has the entropy rate it claims", "[engine][data]")
{
    const MarkovSource source(16, 99);
    const auto tokens = source.generate(400000, 5);
    // Independent estimate: the empirical conditional entropy H(next | current) from bigram counts.
    std::map<std::pair<int, int>, double> pairs;
    std::map<int, double> singles;
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
        pairs[{tokens[i], tokens[i + 1]}] += 1;
        singles[tokens[i]] += 1;
    }
    double h = 0;
    const double n = static_cast<double>(tokens.size() - 1);
    for (const auto& [pair, count] : pairs)
        h -= count / n * std::log(count / singles[pair.first]);
    CHECK(source.entropyRate() == Approx(h).epsilon(0.01));
    CHECK(source.entropyRate() > 0.3);
    CHECK(source.entropyRate() < std::log(4.0) + 1e-9); // at most 4 successors
}

TEST_CASE("token streams outside the vocabulary are refused with the position", "[engine][data]")
{
    DataSpec spec;
    spec.kind = DataSpec::Kind::Text;
    spec.path = "/nonexistent/pw.txt";
    CHECK_THROWS_WITH(loadTokens(spec, 256), Catch::Contains("/nonexistent/pw.txt: cannot open the text file"));
    CHECK_THROWS_WITH(dataKindFromString("csv"), Catch::Contains("use synthetic, tokens or text"));
}

TEST_CASE(
    "a token file needs one microbatch of tokens and ids inside the vocabulary, a directory is named", "[engine][data]")
{
    const auto dir = std::filesystem::temp_directory_path() / ("pw-data-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    DataSpec spec;
    spec.kind = DataSpec::Kind::Tokens;
    spec.path = dir / "t.bin";
    writeTokens(spec.path, std::vector<std::int32_t>(17, 3));
    CHECK(loadTokens(spec, 32, 16).size() == 17); // 2 x 8 inputs and one more target
    CHECK_THROWS_WITH(loadTokens(spec, 32, 17),
        Catch::Contains("t.bin: tokens: holds 17 tokens; one microbatch reads 18 (its sequences' tokens and one more "
                        "target)"));
    writeTokens(spec.path, {1, 2, 40, 3});
    CHECK_THROWS_WITH(loadTokens(spec, 32),
        Catch::Contains("t.bin: tokens: token 40 at position 2 is outside the plan's vocabulary of 32 (ids 0..31)"));
    spec.path = dir;
    CHECK_THROWS_WITH(
        loadTokens(spec, 32), Catch::Contains(dir.string() + ": is a directory, not a token or text file"));
    spec.kind = DataSpec::Kind::Text;
    CHECK_THROWS_WITH(loadTokens(spec, 256), Catch::Contains("is a directory"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("the synthetic corpus takes vocabularies past 16-bit ids", "[engine][data]")
{
    const MarkovSource source(70000, 3);
    const auto tokens = source.generate(200000, 4);
    const auto top = *std::max_element(tokens.begin(), tokens.end());
    CHECK(top >= 65536); // ids a 16-bit token file could not hold
    CHECK(top < 70000);
    CHECK(source.entropyRate() > 0);
    CHECK_THROWS_WITH(MarkovSource(2000000, 1), Catch::Contains("must be in 2..1048576"));
}
