// SPDX-License-Identifier: MIT
#include "llmc.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "model.h"
#include "part_file.h"
#include "planner/errors.h"

namespace pw::engine {

using planner::InputError;

namespace {

using Header = std::array<std::int32_t, 256>;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what)
{
    throw InputError(path.string() + ": " + what);
}

/// An error in field `field` of the file's header (llm.c's names: "magic", "version", "vocab", ...).
[[noreturn]] void failField(const std::filesystem::path& path, const std::string& field, const std::string& what)
{
    throw InputError(path.string(), 0, "header " + field, what);
}

Header readHeader(std::ifstream& in, const std::filesystem::path& path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        fail(path, "is a directory, not a file");
    if (!in)
        fail(path, std::filesystem::exists(path, ec) ? "cannot open the file" : "cannot open: no such file");
    Header h {};
    in.read(reinterpret_cast<char*>(h.data()), sizeof(Header));
    if (in.gcount() != static_cast<std::streamsize>(sizeof(Header)))
        fail(path, "shorter than llm.c's 1024-byte header (" + std::to_string(in.gcount()) + " bytes)");
    return h;
}

std::uintmax_t fileSize(const std::filesystem::path& path)
{
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    return ec ? 0 : size;
}

void writeAll(const std::filesystem::path& path, const Header& header, const void* data, std::size_t bytes)
{
    // Written beside the target and renamed: a reader never sees half a file.
    const auto tmp = std::filesystem::path(path.string() + ".partial");
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out)
            fail(tmp, "cannot create the file");
        out.write(reinterpret_cast<const char*>(header.data()), sizeof(Header));
        out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
        if (!out.flush())
            fail(tmp, "write failed (disk full?)");
    }
    std::filesystem::rename(tmp, path);
}

} // namespace

namespace {

ModelConfig checkpointConfig(std::ifstream& in, const std::filesystem::path& path)
{
    const Header h = readHeader(in, path);
    if (h[0] != kCheckpointMagic)
        failField(path, "magic",
            "not an llm.c GPT-2 checkpoint (magic " + std::to_string(h[0]) + ", expected "
                + std::to_string(kCheckpointMagic)
                + (h[0] == kTokensMagic || h[0] == kTokens32Magic ? ", which is a token file's: --data?" : "") + ")");
    if (h[1] != kCheckpointVersionFp32)
        failField(path, "version",
            "checkpoint version " + std::to_string(h[1]) + " is not supported: only version 3 (fp32)"
                + (h[1] == 5 ? "; version 5 is bf16, convert it with llm.c's train_gpt2.py" : ""));
    const ModelConfig config = {h[2], h[3], h[7], h[4], h[5], h[6]};
    try {
        config.validate();
    } catch (const InputError& e) {
        fail(path, "header: " + e.message());
    }
    const std::size_t n = parameterCount(config);
    const std::uintmax_t expected = sizeof(Header) + n * sizeof(float);
    if (fileSize(path) != expected)
        fail(path,
            "holds " + std::to_string(fileSize(path)) + " bytes; its header describes " + std::to_string(n)
                + " parameters, " + std::to_string(expected) + " bytes");
    return config;
}

} // namespace

ModelConfig readCheckpointConfig(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    return checkpointConfig(in, path);
}

void checkCheckpointFits(
    const std::filesystem::path& path, const ModelConfig& checkpoint, const ModelConfig& plan, int seq)
{
    const auto same = [&](const char* field, int has, int wants) {
        if (has != wants)
            failField(path, field,
                "the checkpoint's model has " + std::string(field) + " " + std::to_string(has) + ", the plan's "
                    + std::to_string(wants));
    };
    if (std::string(familyOf(plan).name()) != "gpt2")
        failField(path, "magic",
            "llm.c's checkpoint holds GPT-2's block, and the plan's model is another family (Llama's): give a "
            "safetensors checkpoint");
    same("layers", checkpoint.layers, plan.layers);
    same("channels", checkpoint.channels, plan.channels);
    same("heads", checkpoint.heads, plan.heads);
    same("vocab", checkpoint.vocab, plan.vocab);
    if (checkpoint.max_seq < seq)
        failField(path, "maxT",
            "the checkpoint's model has " + std::to_string(checkpoint.max_seq)
                + " positions (maxT), the plan's sequences are " + std::to_string(seq) + " tokens long");
}

Checkpoint readCheckpoint(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    Checkpoint c;
    c.config = checkpointConfig(in, path);
    const std::size_t n = parameterCount(c.config);
    c.params.resize(n);
    in.read(reinterpret_cast<char*>(c.params.data()), static_cast<std::streamsize>(n * sizeof(float)));
    if (in.gcount() != static_cast<std::streamsize>(n * sizeof(float)))
        fail(path, "truncated parameters");
    return c;
}

void writeCheckpoint(const std::filesystem::path& path, const Checkpoint& c)
{
    if (c.params.size() != parameterCount(c.config))
        throw std::logic_error("writeCheckpoint: parameter count does not match the config");
    Header h {};
    h[0] = kCheckpointMagic;
    h[1] = kCheckpointVersionFp32;
    h[2] = c.config.max_seq;
    h[3] = c.config.vocab;
    h[4] = c.config.layers;
    h[5] = c.config.heads;
    h[6] = c.config.channels;
    h[7] = c.config.padded_vocab;
    writeAll(path, h, c.params.data(), c.params.size() * sizeof(float));
}

void checkCheckpointDestination(const std::filesystem::path& path)
{
    const auto refuse = [&](const std::string& why) {
        throw InputError(path.string(), 0, "", "cannot save the trained model there: " + why);
    };
    if (path.empty() || !path.has_filename())
        refuse("give a file name, not a folder");
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (std::filesystem::is_directory(status))
        refuse("it is a directory; give a file name in it (e.g. " + (path / "model.bin").string() + ")");
    const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    const auto folderStatus = std::filesystem::status(folder, ec);
    if (!std::filesystem::exists(folderStatus))
        refuse("the folder " + folder.string() + " does not exist");
    if (!std::filesystem::is_directory(folderStatus))
        refuse(folder.string() + " is not a folder");
    // Whoever starts the run removes an old file and the agents create it anew: the folder must take new files.
    if (::access(folder.c_str(), W_OK | X_OK) != 0)
        refuse("the folder " + folder.string() + " is not writable (" + std::strerror(errno) + ")");
    if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
        refuse("it is not a regular file");
}

void writeCheckpointPart(const std::filesystem::path& path, const StageModel& stage)
{
    const ModelConfig& c = stage.config();
    if (std::string(familyOf(c).name()) != "gpt2")
        throw InputError(path.string(), 0, "", "llm.c's checkpoint holds GPT-2's block only");
    PartFile file(path);
    if (stage.hasEmbedding() && stage.tensorParallel().rank == 0) {
        Header h {};
        h[0] = kCheckpointMagic;
        h[1] = kCheckpointVersionFp32;
        h[2] = c.max_seq;
        h[3] = c.vocab;
        h[4] = c.layers;
        h[5] = c.heads;
        h[6] = c.channels;
        h[7] = c.padded_vocab;
        file.put(h.data(), sizeof(Header), 0);
    }
    const std::vector<float> params = stage.hostParams();
    for (const auto& t : checkpointTensors(c))
        for (const auto& slot : stage.slots())
            if (slot.name == t.name && stage.writes(slot))
                for (const auto& piece : stage.pieces(slot))
                    file.put(params.data() + piece.held, piece.count * sizeof(float),
                        sizeof(Header) + (t.offset + piece.whole) * sizeof(float));
    file.close();
}

std::vector<std::int32_t> readTokens(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    const Header h = readHeader(in, path);
    if (h[0] != kTokensMagic && h[0] != kTokens32Magic)
        failField(path, "magic",
            "not an llm.c token file (magic " + std::to_string(h[0]) + ", expected " + std::to_string(kTokensMagic)
                + " for 16-bit or " + std::to_string(kTokens32Magic) + " for 32-bit ids"
                + (h[0] == kCheckpointMagic ? ", which is a checkpoint's: --init?" : "") + ")");
    const bool wide = h[0] == kTokens32Magic;
    const std::int32_t version = wide ? kTokens32Version : kTokensVersion;
    if (h[1] != version)
        failField(path, "version",
            "token file version " + std::to_string(h[1]) + " is not supported (expected " + std::to_string(version)
                + (wide ? " for 32-bit ids)" : " for 16-bit ids)"));
    if (h[2] < 0)
        failField(path, "count", "negative token count " + std::to_string(h[2]));
    const auto count = static_cast<std::size_t>(h[2]);
    const std::size_t width = wide ? sizeof(std::uint32_t) : sizeof(std::uint16_t);
    const std::uintmax_t expected = sizeof(Header) + count * width;
    if (fileSize(path) != expected)
        fail(path,
            "holds " + std::to_string(fileSize(path)) + " bytes; its header says " + std::to_string(count) + " tokens, "
                + std::to_string(expected) + " bytes");
    std::vector<std::int32_t> tokens(count);
    if (wide) {
        std::vector<std::uint32_t> ids(count);
        in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(count * width));
        for (std::size_t i = 0; i < count; ++i) {
            if (ids[i] > 0x7fffffffu)
                failField(path, "tokens",
                    "token " + std::to_string(ids[i]) + " at position " + std::to_string(i) + " is past 2^31 - 1");
            tokens[i] = static_cast<std::int32_t>(ids[i]);
        }
    } else {
        std::vector<std::uint16_t> ids(count);
        in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(count * width));
        std::copy(ids.begin(), ids.end(), tokens.begin());
    }
    return tokens;
}

void writeTokens(const std::filesystem::path& path, const std::vector<std::int32_t>& tokens, TokenWidth width)
{
    if (tokens.size() > 0x7fffffffu)
        throw InputError(path.string() + ": more tokens than llm.c's int32 count holds");
    const bool wide = width == TokenWidth::Bits32;
    const std::int32_t top = wide ? 0x7fffffff : 0xffff;
    for (std::size_t i = 0; i < tokens.size(); ++i)
        if (tokens[i] < 0 || tokens[i] > top)
            throw InputError(path.string(), 0, "tokens",
                "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) + " does not fit "
                    + (wide ? "a 32-bit id" : "the 16-bit format (ids 0..65,535): write the 32-bit one"));
    Header h {};
    h[0] = wide ? kTokens32Magic : kTokensMagic;
    h[1] = wide ? kTokens32Version : kTokensVersion;
    h[2] = static_cast<std::int32_t>(tokens.size());
    if (wide) {
        const std::vector<std::uint32_t> ids(tokens.begin(), tokens.end());
        writeAll(path, h, ids.data(), ids.size() * sizeof(std::uint32_t));
    } else {
        std::vector<std::uint16_t> ids(tokens.size());
        std::transform(
            tokens.begin(), tokens.end(), ids.begin(), [](std::int32_t t) { return static_cast<std::uint16_t>(t); });
        writeAll(path, h, ids.data(), ids.size() * sizeof(std::uint16_t));
    }
}

} // namespace pw::engine
