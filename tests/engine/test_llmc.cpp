// SPDX-License-Identifier: MIT
// llm.c's checkpoint and token files: round trips and every malformed header named.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "engine/data.h"
#include "engine/llmc.h"
#include "planner/errors.h"

using namespace pw::engine;
namespace fs = std::filesystem;

namespace {

struct TempDir
{
    fs::path path = fs::temp_directory_path() / ("pw-llmc-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

void writeInts(const fs::path& p, std::vector<std::int32_t> header, std::size_t extraBytes)
{
    header.resize(256, 0);
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    std::string pad(extraBytes, '\0');
    out.write(pad.data(), static_cast<std::streamsize>(pad.size()));
}

} // namespace

TEST_CASE("a checkpoint round-trips bit for bit", "[engine][llmc]")
{
    TempDir dir;
    Checkpoint c;
    c.config = {8, 11, 16, 2, 2, 8};
    c.params.resize(parameterCount(c.config));
    for (std::size_t i = 0; i < c.params.size(); ++i)
        c.params[i] = static_cast<float>(i) * 0.25f - 3.0f;
    writeCheckpoint(dir.path / "m.bin", c);
    CHECK(fs::file_size(dir.path / "m.bin") == 1024 + c.params.size() * 4);
    CHECK(readCheckpoint(dir.path / "m.bin") == c);
}

TEST_CASE("malformed checkpoints name the file and the problem", "[engine][llmc]")
{
    TempDir dir;
    const auto p = dir.path / "bad.bin";
    writeInts(p, {1, 3}, 0);
    CHECK_THROWS_WITH(
        readCheckpoint(p), Catch::Contains("bad.bin: header magic: not an llm.c GPT-2 checkpoint (magic 1"));
    writeInts(p, {kCheckpointMagic, 5, 8, 11, 2, 2, 8, 16}, 0);
    CHECK_THROWS_WITH(readCheckpoint(p), Catch::Contains("version 5 is not supported: only version 3 (fp32)"));
    writeInts(p, {kCheckpointMagic, 3, 8, 11, 2, 2, 9, 16}, 0);
    CHECK_THROWS_WITH(readCheckpoint(p), Catch::Contains("header: channels: 9 is not a multiple of heads"));
    writeInts(p, {kCheckpointMagic, 3, 8, 11, 2, 2, 8, 16}, 100);
    CHECK_THROWS_WITH(readCheckpoint(p), Catch::Contains("its header describes"));
    std::ofstream(p, std::ios::trunc) << "short";
    CHECK_THROWS_WITH(readCheckpoint(p), Catch::Contains("shorter than llm.c's 1024-byte header"));
    CHECK_THROWS_WITH(readCheckpoint(dir.path / "missing.bin"), Catch::Contains("missing.bin: cannot open"));
}

TEST_CASE("token files round-trip and are checked", "[engine][llmc]")
{
    TempDir dir;
    const std::vector<std::int32_t> tokens = {0, 1, 65535, 50256, 7};
    writeTokens(dir.path / "t.bin", tokens);
    CHECK(std::filesystem::file_size(dir.path / "t.bin") == 1024 + 5 * 2);
    CHECK(readTokens(dir.path / "t.bin") == tokens);
    writeInts(dir.path / "bad.bin", {kTokensMagic, 1, 10}, 6);
    CHECK_THROWS_WITH(readTokens(dir.path / "bad.bin"), Catch::Contains("its header says 10 tokens"));
    writeInts(dir.path / "bad.bin", {kTokensMagic, 2, 0}, 0);
    CHECK_THROWS_WITH(readTokens(dir.path / "bad.bin"), Catch::Contains("token file version 2 is not supported"));
    CHECK_THROWS_WITH(writeTokens(dir.path / "t.bin", {3, 128000}),
        Catch::Contains("tokens: token 128000 at position 1 does not fit the 16-bit format"));
}

TEST_CASE("32-bit token files are llm.c's Llama 3 format and read beside the 16-bit ones", "[engine][llmc]")
{
    // llm.c's dev/data/data_common.py, "llama-3": magic 20240801, version 7, uint32 ids after 256 int32.
    TempDir dir;
    const std::vector<std::int32_t> tokens = {0, 128000, 128255, 65536, 9};
    writeTokens(dir.path / "t32.bin", tokens, TokenWidth::Bits32);
    CHECK(std::filesystem::file_size(dir.path / "t32.bin") == 1024 + 5 * 4);
    std::ifstream in(dir.path / "t32.bin", std::ios::binary);
    std::int32_t head[3] = {};
    in.read(reinterpret_cast<char*>(head), sizeof head);
    CHECK(head[0] == 20240801);
    CHECK(head[1] == 7);
    CHECK(head[2] == 5);
    CHECK(readTokens(dir.path / "t32.bin") == tokens);
    // A loaded stream checks every id against the plan's vocabulary, naming the position.
    DataSpec spec;
    spec.kind = DataSpec::Kind::Tokens;
    spec.path = dir.path / "t32.bin";
    CHECK(loadTokens(spec, 128256) == tokens);
    CHECK_THROWS_WITH(loadTokens(spec, 50257),
        Catch::Contains("t32.bin: tokens: token 128000 at position 1 is outside the plan's vocabulary of 50257"));
    // Damaged: a wrong version, a short file, an id past 2^31 - 1.
    writeInts(dir.path / "bad.bin", {kTokens32Magic, 1, 0}, 0);
    CHECK_THROWS_WITH(readTokens(dir.path / "bad.bin"),
        Catch::Contains("header version: token file version 1 is not supported (expected 7 for 32-bit ids)"));
    writeInts(dir.path / "bad.bin", {kTokens32Magic, 7, 4}, 4); // four 16-bit-sized ids: half the bytes
    CHECK_THROWS_WITH(readTokens(dir.path / "bad.bin"), Catch::Contains("its header says 4 tokens, 1040 bytes"));
    writeInts(dir.path / "bad.bin", {kTokens32Magic, 7, 1}, 0);
    {
        std::ofstream out(dir.path / "bad.bin", std::ios::binary | std::ios::app);
        const std::uint32_t huge = 0x80000000u;
        out.write(reinterpret_cast<const char*>(&huge), sizeof huge);
    }
    CHECK_THROWS_WITH(readTokens(dir.path / "bad.bin"), Catch::Contains("token 2147483648 at position 0"));
}

TEST_CASE(
    "a checkpoint's shape is read from its header and checked against the plan's, naming the field", "[engine][llmc]")
{
    TempDir dir;
    Checkpoint c;
    c.config = {8, 11, 128, 2, 2, 8};
    c.params.resize(parameterCount(c.config));
    writeCheckpoint(dir.path / "m.bin", c);
    CHECK(readCheckpointConfig(dir.path / "m.bin") == c.config);
    checkCheckpointFits(dir.path / "m.bin", c.config, {8, 11, 128, 2, 2, 8}, 8);
    checkCheckpointFits(dir.path / "m.bin", c.config, {16, 11, 128, 2, 2, 8}, 4); // more positions than used
    const auto fits = [&](ModelConfig plan, int seq) { checkCheckpointFits(dir.path / "m.bin", c.config, plan, seq); };
    CHECK_THROWS_WITH(fits({8, 12, 128, 2, 2, 8}, 8),
        Catch::Contains("m.bin: header vocab: the checkpoint's model has vocab 11, the plan's 12"));
    CHECK_THROWS_WITH(fits({8, 11, 128, 3, 2, 8}, 8),
        Catch::Contains("header layers: the checkpoint's model has layers 2, the plan's 3"));
    CHECK_THROWS_WITH(fits({8, 11, 128, 2, 4, 8}, 8), Catch::Contains("header heads"));
    CHECK_THROWS_WITH(fits({8, 11, 128, 2, 2, 16}, 8), Catch::Contains("header channels"));
    CHECK_THROWS_WITH(fits({16, 11, 128, 2, 2, 8}, 16),
        Catch::Contains("header maxT: the checkpoint's model has 8 positions (maxT), the plan's sequences are 16"));
    // A token file given as a checkpoint, a directory, a bf16 checkpoint: each named without reading further.
    writeTokens(dir.path / "t.bin", {1, 2, 3});
    CHECK_THROWS_WITH(readCheckpointConfig(dir.path / "t.bin"),
        Catch::Contains("t.bin: header magic: not an llm.c GPT-2 checkpoint") && Catch::Contains("--data?"));
    CHECK_THROWS_WITH(readCheckpointConfig(dir.path), Catch::Contains(dir.path.string() + ": is a directory"));
    writeInts(dir.path / "bf16.bin", {kCheckpointMagic, 5, 8, 11, 2, 2, 8, 128}, 0);
    CHECK_THROWS_WITH(readCheckpointConfig(dir.path / "bf16.bin"), Catch::Contains("bf16.bin: header version:"));
    CHECK_THROWS_WITH(readTokens(dir.path), Catch::Contains("is a directory, not a file"));
    CHECK_THROWS_WITH(readTokens(dir.path / "m.bin"), Catch::Contains("header magic") && Catch::Contains("--init?"));
}
