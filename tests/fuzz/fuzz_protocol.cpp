// SPDX-License-Identifier: MIT
// Fuzz target: the bytes an agent or a controller could receive. Each input is a byte stream fed to a
// FrameDecoder twice, once whole and once in pieces derived from the input; every frame is decoded into a Message.
// A ProtocolError is the expected answer to bad bytes. Findings: any other exception, a crash (ASan/UBSan under
// libFuzzer), the two feedings disagreeing, or a decoded message that does not re-encode to itself.
//
// The custom mutator knows the framing: besides libFuzzer's byte mutations it edits header fields, edits payloads
// and fixes their length and CRC (else almost every payload edit dies at the CRC check), and edits the decoded
// CBOR value (a field removed, retyped or pushed to an extreme) so that every message's field checks are reached.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agents/protocol/frame.h"
#include "agents/protocol/messages.h"

using namespace pw::agents;
using nlohmann::json;

/// libFuzzer's byte-level mutator (fuzz_driver.cpp provides one for builds without libFuzzer).
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t maxSize);

namespace {

// ---- the check ----

struct Outcome
{
    std::vector<Frame> frames;
    std::string error; ///< the ProtocolError that ended the stream, or ""

    bool operator==(const Outcome&) const = default;
};

[[noreturn]] void finding(const std::string& what)
{
    std::fprintf(stderr, "finding: %s\n", what.c_str());
    std::abort();
}

/// Feeds the stream whole (seed 0) or in pieces of 0..64 bytes drawn from `seed`, taking frames as they come.
Outcome feed(const uint8_t* data, size_t size, std::uint64_t seed)
{
    Outcome out;
    FrameDecoder decoder;
    std::mt19937_64 rng(seed);
    try {
        for (size_t at = 0; at < size;) {
            const size_t n = seed == 0 ? size : std::min<size_t>(size - at, rng() % 65);
            decoder.feed(std::span(reinterpret_cast<const std::byte*>(data) + at, n));
            at += n;
            while (auto frame = decoder.next())
                out.frames.push_back(std::move(*frame));
        }
        decoder.finish();
    } catch (const ProtocolError& e) {
        out.error = e.what();
    }
    return out;
}

/// A decoded message re-encodes to bytes that decode to a message encoding to the same bytes (compared as bytes:
/// a NaN field is not equal to itself).
void checkMessage(const Frame& frame)
{
    std::string once;
    try {
        once = encode(decode(frame));
    } catch (const ProtocolError&) {
        return; // refused, as bad input should be
    }
    try {
        FrameDecoder decoder;
        decoder.feed(once);
        const std::optional<Frame> again = decoder.next();
        if (!again || encode(decode(*again)) != once)
            finding(toString(frame.type) + ": a decoded message does not re-encode to itself");
    } catch (const ProtocolError& e) {
        finding(toString(frame.type) + ": our own encoding is refused: " + e.what());
    }
}

std::uint64_t fnv1a(const uint8_t* data, size_t size)
{
    std::uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < size; ++i)
        h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

// ---- framing-aware mutations ----

struct FrameAt
{
    size_t offset;
    size_t length; ///< payload bytes
};

/// The frames at the start of `s` whose header is plausible and whose payload is complete.
std::vector<FrameAt> framesIn(const std::string& s)
{
    std::vector<FrameAt> out;
    for (size_t at = 0; at + kHeaderSize <= s.size() && s.compare(at, 4, "PWAG") == 0;) {
        const auto length = static_cast<size_t>(static_cast<std::uint8_t>(s[at + 8]))
            | static_cast<size_t>(static_cast<std::uint8_t>(s[at + 9])) << 8
            | static_cast<size_t>(static_cast<std::uint8_t>(s[at + 10])) << 16
            | static_cast<size_t>(static_cast<std::uint8_t>(s[at + 11])) << 24;
        if (at + kHeaderSize + length > s.size())
            break;
        out.push_back({at, length});
        at += kHeaderSize + length;
    }
    return out;
}

void putLe(std::string& s, size_t at, std::uint32_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i)
        s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

/// Replaces the payload of frame `f` of `s`, fixing its length and CRC.
void replacePayload(std::string& s, const FrameAt& f, const std::vector<std::uint8_t>& payload)
{
    s.replace(f.offset + kHeaderSize, f.length, std::string(payload.begin(), payload.end()));
    putLe(s, f.offset + 8, static_cast<std::uint32_t>(payload.size()), 4);
    putLe(s, f.offset + 12, crc32(payload), 4);
}

std::vector<std::uint8_t> payloadOf(const std::string& s, const FrameAt& f)
{
    const auto* p = reinterpret_cast<const std::uint8_t*>(s.data()) + f.offset + kHeaderSize;
    return {p, p + f.length};
}

json interestingValue(std::mt19937& rng)
{
    switch (rng() % 14) {
    case 0:
        return nullptr;
    case 1:
        return true;
    case 2:
        return -1;
    case 3:
        return 0;
    case 4:
        return std::numeric_limits<std::int64_t>::min();
    case 5:
        return std::numeric_limits<std::uint64_t>::max();
    case 6:
        return 1.5;
    case 7:
        return std::nan("");
    case 8:
        return "";
    case 9:
        return "synthetic";
    case 10:
        return json::array();
    case 11:
        return json::object();
    case 12:
        return json::binary({1, 2, 3});
    default:
        return json::array({0, 9, 99, -1, 1e300, 0, 0, 2147483648.0, -1, 0, 0});
    }
}

/// Every value of `j`, containers included, down to a modest depth.
void collect(json& j, std::vector<json*>& out, int depth)
{
    out.push_back(&j);
    if (depth < 8 && j.is_structured())
        for (json& child : j)
            collect(child, out, depth + 1);
}

/// Edits one value of a frame's decoded payload: replaced, erased from its map, or a copy pushed to its array.
bool mutateValue(std::string& s, const FrameAt& f, std::mt19937& rng)
{
    json j;
    try {
        j = json::from_cbor(payloadOf(s, f)); // throws out_of_range for absurd sizes even when told not to throw
    } catch (const json::exception&) {
        return false;
    }
    std::vector<json*> values;
    collect(j, values, 0);
    json& v = *values[rng() % values.size()];
    if (v.is_object() && !v.empty() && rng() % 2) {
        const std::string key = std::next(v.begin(), static_cast<std::ptrdiff_t>(rng() % v.size())).key();
        v.erase(key);
    } else if (v.is_array() && !v.empty() && rng() % 2) {
        v.push_back(json(v[rng() % v.size()])); // copied first: push_back may reallocate
    } else {
        v = interestingValue(rng);
    }
    replacePayload(s, f, json::to_cbor(j));
    return true;
}

/// Byte-level edit of one frame's payload with its length and CRC fixed.
void mutatePayload(std::string& s, const FrameAt& f, size_t maxSize)
{
    std::vector<std::uint8_t> payload = payloadOf(s, f);
    const size_t room = maxSize > s.size() ? maxSize - s.size() : 0;
    payload.resize(f.length + std::min<size_t>(room, 64));
    if (payload.empty())
        return;
    payload.resize(LLVMFuzzerMutate(payload.data(), f.length, payload.size()));
    replacePayload(s, f, payload);
}

void mutateHeader(std::string& s, const FrameAt& f, std::mt19937& rng)
{
    const std::uint32_t values[] = {0, 1, 2, kProtocolVersion, kMessageTypeCount, kMessageTypeCount + 1u,
        static_cast<std::uint32_t>(f.length + 1), kMaxPayload, kMaxPayload + 1, 0xFFFFFFFFu,
        static_cast<std::uint32_t>(rng())};
    const std::uint32_t v = values[rng() % std::size(values)];
    switch (rng() % 4) {
    case 0:
        putLe(s, f.offset + 4, v, 2);
        break; // version
    case 1:
        putLe(s, f.offset + 6, v, 2);
        break; // type
    case 2:
        putLe(s, f.offset + 8, v, 4);
        break; // length
    default:
        putLe(s, f.offset + 12, v, 4);
        break; // CRC
    }
}

} // namespace

/// Valid frames of every message type, with content in every field: the fuzz driver's seed corpus, and what the
/// custom mutator splices in.
std::vector<std::string> pwFuzzSeeds()
{
    pw::planner::Span span;
    span.lane = pw::planner::Lane::Send;
    span.kind = pw::planner::ActionKind::SendActivation;
    span.t0 = 0.25;
    span.t1 = 0.5;
    span.peer = 1;
    span.weight_version = 3;
    span.bytes = 4096;
    // The zero-bubble kinds (version 6): BackwardInput is the last kind, so a mutated kind just past it is refused.
    pw::planner::Span input;
    input.kind = pw::planner::ActionKind::BackwardInput;
    input.stage = 3;
    input.microbatch = 7;
    input.t0 = 0.5;
    input.t1 = 0.75;
    pw::planner::Span weight = input;
    weight.kind = pw::planner::ActionKind::BackwardWeight;
    RunSpec run;
    run.run_id = "r1";
    run.agent = "a";
    run.plan = {{"format_version", 3}, {"stages", json::array({{{"first_layer", 0}, {"devices", {0, 1}}}})}};
    run.devices = {0, 1};
    run.cuda_devices = {0, -1};
    run.precision = Precision::Bf16;
    run.training = {12, {DataKind::Text, "/data/x.txt", 7}, "/c", "/s", 1e-3, 0.1, 3, true, 99};
    run.transport = Transport::Nccl; // version 5's transport: its name in the seed, mutated like any other field
    const std::vector<Message> messages = {
        Hello {1, "0.3", "host", 42, 8, 1 << 30, {"cpu", "gloo", "cuda"}, {{0, "H100", 80, 79, 9, 0}}, "OpenBLAS",
            {true, "13.0", "13.0", "13.1.0", "2.28.9", {80, 90}, ""}},
        run,
        RendezvousSet {"k", {0, 255}},
        RendezvousGet {"k"},
        RendezvousValue {"k", {1}},
        Start {},
        Stop {"why"},
        Resume {3},
        Telemetry {"a", 2, 5, {span, span, input, weight}, {{1, "loss", 2.5, 0.75, 0}}},
        Heartbeat {1.5, 10, {{0, 12, true, span}, {1, 0, false, {}}}},
        Log {LogLevel::Debug, "hi", 0.5},
        Error {"bad", true},
        Done {DoneStatus::Succeeded, 0.125, 10, ""},
        ClockProbe {1, 2.5},
        ClockReply {1, 2.5, 3.5},
        FlightRecorderAsk {"stalled"},
        FlightRecorder {"a", 2.5, {span, input}},
        Heartbeat {2.5, 11, {{0, 13, true, weight}}},
    };
    std::vector<std::string> seeds;
    std::string all;
    for (const Message& m : messages) {
        seeds.push_back(encode(m));
        all += seeds.back();
    }
    seeds.push_back(all);
    return seeds;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const Outcome whole = feed(data, size, 0);
    if (feed(data, size, fnv1a(data, size) | 1) != whole)
        finding("feeding the stream in pieces gives other frames or another error than feeding it whole");
    for (const Frame& frame : whole.frames)
        checkMessage(frame);
    return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t maxSize, unsigned int seed)
{
    std::mt19937 rng(seed);
    std::string s(reinterpret_cast<const char*>(data), size);
    const std::vector<FrameAt> frames = framesIn(s);
    const unsigned choice = rng() % 10;
    if (choice == 0 || (frames.empty() && choice < 4)) {
        static const std::vector<std::string> seeds = pwFuzzSeeds();
        const std::string& seed = seeds[rng() % seeds.size()];
        s.insert(frames.empty() ? 0 : frames[rng() % frames.size()].offset, seed); // splice a valid frame in
    } else if (!frames.empty() && choice <= 6) {
        const FrameAt& f = frames[rng() % frames.size()];
        if (choice <= 2)
            mutateHeader(s, f, rng);
        else if (choice <= 4)
            mutatePayload(s, f, maxSize);
        else if (!mutateValue(s, f, rng))
            mutatePayload(s, f, maxSize);
    } else {
        return LLVMFuzzerMutate(data, size, maxSize);
    }
    if (s.size() > maxSize)
        s.resize(maxSize);
    std::copy(s.begin(), s.end(), data);
    return s.size();
}
