// SPDX-License-Identifier: MIT
#include "safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bf16.h"
#include "part_file.h"
#include "planner/errors.h"

namespace pw::engine {

using planner::InputError;

namespace {

constexpr std::uint64_t kMaxHeader = 100u << 20; // the format's own limit on the header (100 MB)

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& field, const std::string& what)
{
    throw InputError(path.string(), 0, field, what);
}

std::size_t dtypeBytes(const std::string& dtype)
{
    if (dtype == "F64" || dtype == "I64" || dtype == "U64")
        return 8;
    if (dtype == "F32" || dtype == "I32" || dtype == "U32")
        return 4;
    if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
        return 2;
    if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2")
        return 1;
    return 0;
}

float fromHalf(std::uint16_t h)
{
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const int exponent = (h >> 10) & 0x1f;
    const std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) // zero or subnormal: mantissa x 2^-24
        return std::bit_cast<float>(sign) + (sign ? -1.0f : 1.0f) * static_cast<float>(mantissa) * 0x1p-24f;
    if (exponent == 31)
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    return std::bit_cast<float>(sign | static_cast<std::uint32_t>(exponent + 112) << 23 | (mantissa << 13));
}

/// The shape a file holds for `t`: V rows for the padded vocabulary's matrices.
std::vector<std::size_t> storedShape(const TensorSlot& t, const ModelConfig& config)
{
    std::vector<std::size_t> shape = t.shape;
    if (t.padded_rows)
        shape.front() = static_cast<std::size_t>(config.vocab);
    return shape;
}

std::size_t elements(const std::vector<std::size_t>& shape)
{
    std::size_t n = 1;
    for (std::size_t d : shape)
        n *= d;
    return n;
}

std::string shapeText(const std::vector<std::size_t>& shape)
{
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

/// The 8-byte length and the header's text.
std::string readHeaderText(std::ifstream& in, const std::filesystem::path& path, std::uintmax_t size)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        fail(path, "", "is a directory, not a file");
    if (!in)
        fail(path, "", std::filesystem::exists(path, ec) ? "cannot open the file" : "cannot open: no such file");
    unsigned char length[8] = {};
    in.read(reinterpret_cast<char*>(length), 8);
    if (in.gcount() != 8)
        fail(path, "header length", "shorter than safetensors' 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = n << 8 | length[i];
    if (n > kMaxHeader || n > size - 8)
        fail(path, "header length",
            std::to_string(n) + " bytes of header in a file of " + std::to_string(size)
                + " bytes: not a safetensors file");
    std::string text(n, '\0');
    in.read(text.data(), static_cast<std::streamsize>(n));
    return text;
}

} // namespace

bool isSafetensors(const std::filesystem::path& path)
{
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec || size < 10)
        return false;
    std::ifstream in(path, std::ios::binary);
    unsigned char head[9] = {};
    in.read(reinterpret_cast<char*>(head), 9);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = n << 8 | head[i];
    return in.gcount() == 9 && n >= 2 && n <= kMaxHeader && n <= size - 8 && head[8] == '{';
}

std::map<std::string, SafetensorsEntry> readSafetensorsHeader(const std::filesystem::path& path)
{
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    std::ifstream in(path, std::ios::binary);
    const std::string text = readHeaderText(in, path, ec ? 0 : size);
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail(path, "header", std::string("not JSON (") + e.what() + ")");
    }
    if (!header.is_object())
        fail(path, "header", "not a JSON object");
    const std::uintmax_t data = size - 8 - text.size();
    std::map<std::string, SafetensorsEntry> out;
    for (const auto& [name, j] : header.items()) {
        if (name == "__metadata__")
            continue;
        const auto bad
            = [&](const std::string& field, const std::string& what) { fail(path, name + "/" + field, what); };
        if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") || !j.contains("data_offsets"))
            bad("", "expected an object with dtype, shape and data_offsets");
        SafetensorsEntry e;
        if (!j["dtype"].is_string() || dtypeBytes(j["dtype"].get<std::string>()) == 0)
            bad("dtype", "not a safetensors dtype: " + j["dtype"].dump());
        e.dtype = j["dtype"].get<std::string>();
        if (!j["shape"].is_array())
            bad("shape", "expected an array of sizes");
        for (const auto& d : j["shape"]) {
            if (!d.is_number_unsigned())
                bad("shape", "expected sizes >= 0, got " + d.dump());
            e.shape.push_back(d.get<std::size_t>());
        }
        const auto& o = j["data_offsets"];
        if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned())
            bad("data_offsets", "expected [begin, end]");
        e.begin = o[0].get<std::size_t>();
        e.end = o[1].get<std::size_t>();
        if (e.end < e.begin || e.end > data)
            bad("data_offsets",
                "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] is outside the file's "
                    + std::to_string(data) + " bytes of data (truncated?)");
        if (e.end - e.begin != elements(e.shape) * dtypeBytes(e.dtype))
            bad("data_offsets",
                std::to_string(e.end - e.begin) + " bytes for " + shapeText(e.shape) + " of " + e.dtype);
        out.emplace(name, std::move(e));
    }
    return out;
}

void checkSafetensorsModel(const std::filesystem::path& path, const ModelConfig& config)
{
    const auto entries = readSafetensorsHeader(path);
    const auto tensors = checkpointTensors(config);
    for (const auto& t : tensors) {
        const auto it = entries.find(t.name);
        if (it == entries.end())
            fail(path, t.name,
                "missing: the plan's " + std::string(familyOf(config).name()) + " model has this tensor"
                    + (t.name == "lm_head.weight" ? " (an untied head; a file of a tied model has none)" : ""));
        const auto& e = it->second;
        if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16")
            fail(path, t.name + "/dtype", e.dtype + " is not read (F32, BF16, F16 are)");
        if (e.shape != storedShape(t, config))
            fail(path, t.name + "/shape",
                shapeText(e.shape) + ", the plan's model has " + shapeText(storedShape(t, config)));
    }
    for (const auto& [name, e] : entries)
        if (name.find("rotary_emb.inv_freq") == std::string::npos
            && std::none_of(tensors.begin(), tensors.end(), [&](const TensorSlot& t) { return t.name == name; }))
            fail(path, name,
                "the plan's model has no such tensor"
                    + std::string(name == "lm_head.weight" ? " (the plan ties the head to the embedding)" : ""));
}

std::vector<float> loadSafetensorsModel(const std::filesystem::path& path, const ModelConfig& config)
{
    checkSafetensorsModel(path, config);
    const auto entries = readSafetensorsHeader(path);
    std::ifstream in(path, std::ios::binary);
    unsigned char length[8];
    in.read(reinterpret_cast<char*>(length), 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = n << 8 | length[i];
    const std::uint64_t dataStart = 8 + n;
    const auto tensors = checkpointTensors(config);
    std::vector<float> flat(tensors.empty() ? 0 : tensors.back().offset + tensors.back().size, 0.0f);
    std::vector<char> bytes;
    for (const auto& t : tensors) {
        const auto& e = entries.at(t.name);
        bytes.resize(e.end - e.begin);
        in.seekg(static_cast<std::streamoff>(dataStart + e.begin));
        in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (in.gcount() != static_cast<std::streamsize>(bytes.size()))
            fail(path, t.name, "truncated data");
        float* out = flat.data() + t.offset;
        const std::size_t count = elements(e.shape);
        for (std::size_t i = 0; i < count; ++i) {
            if (e.dtype == "F32") {
                std::memcpy(out + i, bytes.data() + 4 * i, 4);
            } else {
                std::uint16_t h;
                std::memcpy(&h, bytes.data() + 2 * i, 2);
                out[i] = e.dtype == "BF16" ? fromBf16(h) : fromHalf(h);
            }
        }
    }
    return flat;
}

SafetensorsLayout safetensorsLayout(const ModelConfig& config, bool bf16)
{
    SafetensorsLayout layout;
    nlohmann::ordered_json header;
    header["__metadata__"] = {{"format", "pt"}};
    const std::size_t element = bf16 ? 2 : 4;
    std::size_t at = 0;
    for (const auto& t : checkpointTensors(config)) {
        SafetensorsEntry e {
            bf16 ? "BF16" : "F32", storedShape(t, config), at, at + elements(storedShape(t, config)) * element};
        at = e.end;
        header[t.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
        layout.tensors.emplace(t.name, std::move(e));
    }
    layout.header = header.dump();
    layout.header.append((8 - layout.header.size() % 8) % 8, ' '); // the data starts 8-byte aligned
    return layout;
}

namespace {

/// The bytes of the file's length field and header.
std::string headerBytes(const SafetensorsLayout& layout)
{
    std::string out(8, '\0');
    std::uint64_t n = layout.header.size();
    for (int i = 0; i < 8; ++i, n >>= 8)
        out[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xff);
    return out + layout.header;
}

/// The stored values of `t` (its first rows for a padded one), in the file's dtype.
std::string tensorBytes(const float* values, std::size_t count, bool bf16)
{
    std::string out(count * (bf16 ? 2 : 4), '\0');
    for (std::size_t i = 0; i < count; ++i) {
        if (bf16) {
            const std::uint16_t h = toBf16(values[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        } else {
            std::memcpy(out.data() + 4 * i, values + i, 4);
        }
    }
    return out;
}

} // namespace

void saveSafetensorsModel(
    const std::filesystem::path& path, const ModelConfig& config, std::span<const float> flat, bool bf16)
{
    const SafetensorsLayout layout = safetensorsLayout(config, bf16);
    const auto tmp = std::filesystem::path(path.string() + ".partial");
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out)
            throw InputError(tmp.string(), 0, "", "cannot create the file");
        out << headerBytes(layout);
        for (const auto& t : checkpointTensors(config)) {
            const std::size_t count = elements(storedShape(t, config));
            out << tensorBytes(flat.data() + t.offset, count, bf16);
        }
        if (!out.flush())
            throw InputError(tmp.string(), 0, "", "write failed (disk full?)");
    }
    std::filesystem::rename(tmp, path);
}

void writeSafetensorsPart(const std::filesystem::path& path, const StageModel& stage)
{
    const SafetensorsLayout layout = safetensorsLayout(stage.config());
    PartFile file(path);
    const auto put = [&](const std::string& bytes, std::size_t at) { file.put(bytes.data(), bytes.size(), at); };
    if (stage.hasEmbedding() && stage.tensorParallel().rank == 0)
        put(headerBytes(layout), 0);
    const std::vector<float> params = stage.hostParams();
    for (const auto& slot : stage.slots()) {
        if (!stage.writes(slot))
            continue; // the head's copy of the embedding (the embedding's stage writes it), or another rank's
        const auto& e = layout.tensors.at(slot.name);
        const std::size_t stored = elements(e.shape); // a padded vocabulary's first V rows
        for (const auto& piece : stage.pieces(slot)) {
            const std::size_t count = std::min(piece.count, stored - std::min(stored, piece.whole));
            if (count > 0)
                put(tensorBytes(params.data() + piece.held, count, false),
                    layout.dataStart() + e.begin + 4 * piece.whole);
        }
    }
    file.close();
}

} // namespace pw::engine
