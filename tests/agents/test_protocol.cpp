// SPDX-License-Identifier: MIT
// The controller <-> agent protocol: the frame header's bytes, CRC-32, every message's round trip, a stream cut
// into any pieces, each error with its message, blocking I/O over a real pipe with concurrent writers, and a
// bounded mutation fuzz run (every mutated stream decodes or throws ProtocolError, nothing else).
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "agents/protocol/frame.h"
#include "agents/protocol/messages.h"

using namespace pw::agents;
using Catch::Contains;
using nlohmann::json;
namespace planner = pw::planner;

namespace {

planner::Span span(int device, planner::Lane lane, planner::ActionKind kind, double t0, double t1)
{
    planner::Span s;
    s.device = device;
    s.lane = lane;
    s.kind = kind;
    s.stage = device;
    s.microbatch = 3;
    s.action = 17;
    s.t0 = t0;
    s.t1 = t1;
    s.peer = lane == planner::Lane::Compute ? -1 : device + 1;
    s.weight_version = 2;
    s.bytes = lane == planner::Lane::Compute ? 0 : 1.5e6;
    return s;
}

RunSpec runSpec()
{
    RunSpec r;
    r.run_id = "run-2024-001";
    r.agent = "node-a";
    r.plan = json::parse(R"({"format_version": 3, "stages": [{"first_layer": 0, "last_layer": 5, "devices": [0, 1]}],
                             "schedule": {"kind": "1f1b", "microbatches": 8}, "predicted": {"iteration_s": 0.125}})");
    r.devices = {0, 1};
    r.cuda_devices = {3, -1}; // device 0 on CUDA device 3, device 1 on the CPU
    r.precision = Precision::Bf16;
    r.training.steps = 1000;
    r.training.data = {DataKind::Tokens, "/data/tiny_shakespeare_train.bin", 42};
    r.training.init_checkpoint = "";
    r.training.save_checkpoint = "/tmp/ckpt.bin";
    r.training.lr = 3e-4;
    r.training.weight_decay = 0.1;
    r.training.warmup_steps = 100;
    r.training.cosine = true;
    r.training.seed = std::numeric_limits<std::uint64_t>::max(); // beyond int64: CBOR's unsigned integers carry it
    r.threads = 4;
    r.journal_path = "/tmp/journal.cbor";
    r.transport = Transport::Local;
    r.telemetry_batch = 256;
    r.gloo_secret = {0x00, 0xff, 0x10, 0x80, 0x7f}; // bytes, not text: a CBOR byte string
    return r;
}

Telemetry telemetry()
{
    Telemetry t;
    t.agent = "node-a";
    t.seq = 7;
    t.first_span = 1201;
    t.spans = {span(0, planner::Lane::Compute, planner::ActionKind::Forward, 0.001, 0.0125),
        span(1, planner::Lane::Send, planner::ActionKind::SendActivation, 0.0125, 0.02),
        span(2, planner::Lane::Collective, planner::ActionKind::WavePull, 1.0 / 3, 2.0 / 3)};
    t.metrics = {{12, "loss", 4.25, 1.5, 1}, {12, "memory", 1.25e9, 1.5, 0}, {13, "tokens_per_s", 1e5, 1.7, -1}};
    return t;
}

/// A GPU server's hello: two GPUs of different memory and capability, one whose free memory is unknown.
Hello hello()
{
    Hello h {1, "0.3.0", "gpu-node-7", 4242, 64, std::int64_t(512) << 30, {"cpu", "gloo", "cuda"},
        {{0, "NVIDIA H100 80GB HBM3", std::int64_t(85) << 30, std::int64_t(80) << 30, 9, 0},
            {1, "NVIDIA A100-SXM4-40GB", std::int64_t(40) << 30, -1, 8, 0}},
        "OpenBLAS 0.3.21"};
    h.cuda = {true, "13.0", "13.0", "13.1.0", "2.28.9", {80, 90}, ""};
    return h;
}

/// One message of every type, with content in every field.
std::vector<Message> samples()
{
    return {hello(), runSpec(), RendezvousSet {"gloo/rank/0", {0x00, 0xFF, 0x10, 0x80}}, RendezvousGet {"gloo/rank/1"},
        RendezvousValue {"gloo/rank/1", {1, 2, 3}}, Start {}, Stop {"user pressed stop"}, Resume {41}, telemetry(),
        Heartbeat {12.5, 99,
            {{3, 1207, true, span(3, planner::Lane::Recv, planner::ActionKind::RecvActivation, 11.25, 0)},
                {4, 1180, false, {}}}},
        Log {LogLevel::Warning, "gradient norm 1e6 at step 12", 3.25}, Error {"peer 2 is gone", true},
        Done {DoneStatus::Stopped, 2.75, 1000, "stopped by the user"}, ClockProbe {7, 12.5},
        ClockReply {7, 12.5, 1012.75}, FlightRecorderAsk {"no progress for 60 s"},
        FlightRecorder {"node-a", 71.5, telemetry().spans}};
}

std::string stream(const std::vector<Message>& messages)
{
    std::string out;
    for (const Message& m : messages)
        out += encode(m);
    return out;
}

/// Feeds `bytes` in pieces of the given sizes (the rest in one piece), taking frames as they come.
std::vector<Frame> decodeInPieces(const std::string& bytes, const std::vector<std::size_t>& pieces)
{
    FrameDecoder decoder;
    std::vector<Frame> frames;
    std::size_t at = 0;
    auto take = [&](std::size_t n) {
        decoder.feed(std::string_view(bytes).substr(at, n));
        at += n;
        while (auto frame = decoder.next())
            frames.push_back(std::move(*frame));
    };
    for (std::size_t n : pieces)
        take(std::min(n, bytes.size() - at));
    take(bytes.size() - at);
    decoder.finish();
    return frames;
}

std::vector<std::size_t> randomPieces(std::size_t total, std::mt19937& rng)
{
    std::vector<std::size_t> pieces;
    for (std::size_t at = 0; at < total;) {
        const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 40)(rng);
        pieces.push_back(n);
        at += n;
    }
    return pieces;
}

void putU16(std::string& s, std::size_t at, std::uint16_t v)
{
    s[at] = static_cast<char>(v & 0xFF);
    s[at + 1] = static_cast<char>(v >> 8);
}
void putU32(std::string& s, std::size_t at, std::uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
std::uint32_t getU32(const std::string& s, std::size_t at)
{
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i)
        v = (v << 8) | std::uint8_t(s[at + i]);
    return v;
}

/// All frames of `bytes` decoded and finished; the error's text, or "" when there was none.
std::string streamError(const std::string& bytes)
{
    try {
        decodeInPieces(bytes, {});
    } catch (const ProtocolError& e) {
        return e.what();
    }
    return "";
}

/// A frame with a valid header and CRC around arbitrary payload bytes.
Frame rawFrame(MessageType type, const std::vector<std::uint8_t>& payload)
{
    return Frame {type, payload};
}

/// The error decoding a message from `payload` gives.
std::string messageError(MessageType type, const json& payload)
{
    try {
        decode(Frame {type, json::to_cbor(payload)});
    } catch (const ProtocolError& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("CRC-32 is the standard reflected 0xEDB88320 one", "[protocol]")
{
    const std::string check = "123456789";
    CHECK(crc32({reinterpret_cast<const std::uint8_t*>(check.data()), check.size()}) == 0xCBF43926u);
    CHECK(crc32({}) == 0u);
}

TEST_CASE("a frame's header is magic, version, type, length and CRC, little-endian", "[protocol]")
{
    // Start's payload is the empty CBOR map, one byte 0xA0. Pinning the bytes pins the wire format.
    const std::string bytes = encode(Start {});
    const std::uint32_t crc = crc32(std::vector<std::uint8_t> {0xA0});
    const std::string expected = std::string("PWAG") + std::string("\x07\x00", 2) + std::string("\x06\x00", 2)
        + std::string("\x01\x00\x00\x00", 4)
        + std::string {char(crc & 0xFF), char((crc >> 8) & 0xFF), char((crc >> 16) & 0xFF), char(crc >> 24)} + "\xA0";
    CHECK(bytes == expected);
    CHECK(kHeaderSize == 16);
}

TEST_CASE("every message survives a round trip through a frame", "[protocol]")
{
    const std::vector<Message> messages = samples();
    REQUIRE(messages.size() == kMessageTypeCount);
    for (std::size_t i = 0; i < messages.size(); ++i) {
        INFO(toString(typeOf(messages[i])));
        CHECK(static_cast<std::size_t>(typeOf(messages[i])) == i + 1);
        FrameDecoder decoder;
        decoder.feed(encode(messages[i]));
        const std::optional<Frame> frame = decoder.next();
        REQUIRE(frame);
        CHECK(frame->type == typeOf(messages[i]));
        CHECK(decode(*frame) == messages[i]);
        CHECK_FALSE(decoder.next());
        decoder.finish();
    }
}

TEST_CASE("a hello carries each GPU and the agent's CUDA field by field", "[protocol]")
{
    const Hello h = hello();
    const Hello back = std::get<Hello>(decode(Frame {MessageType::Hello, json::to_cbor(h.toJson())}));
    REQUIRE(back.gpus.size() == 2);
    CHECK(back.gpus[0]
        == GpuCapability {0, "NVIDIA H100 80GB HBM3", std::int64_t(85) << 30, std::int64_t(80) << 30, 9, 0});
    CHECK(back.gpus[1].free_bytes == -1); // unknown travels as such
    CHECK(back.gpus[1].cc_major == 8);
    CHECK(back.cuda == CudaCapability {true, "13.0", "13.0", "13.1.0", "2.28.9", {80, 90}, ""});
    // An agent without CUDA: no GPU, the reason said.
    Hello cpu = h;
    cpu.gpus.clear();
    cpu.backends = {"cpu", "gloo"};
    cpu.cuda = {false, "", "none", "", "not found", {}, "this build has no CUDA kernels"};
    CHECK(std::get<Hello>(decode(Frame {MessageType::Hello, json::to_cbor(cpu.toJson())})) == cpu);
    // The JSON keys pre-flight and people read (`pipewright-agent --capabilities`).
    const json j = h.toJson();
    CHECK(j["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3");
    CHECK(j["gpus"][0]["cc_major"] == 9);
    CHECK(j["cuda"]["driver"] == "13.0");
    CHECK(j["cuda"]["architectures"] == json::array({80, 90}));
}

TEST_CASE("a run spec carries each device's CUDA device and the precision - absent means the CPU", "[protocol]")
{
    const RunSpec r = runSpec();
    const RunSpec back = std::get<RunSpec>(decode(Frame {MessageType::RunSpec, json::to_cbor(r.toJson())}));
    CHECK(back.cuda_devices == std::vector<int> {3, -1});
    CHECK(back.precision == Precision::Bf16);
    CHECK(r.toJson()["precision"] == "bf16");
    json j = r.toJson();
    j.erase("cuda_devices");
    j.erase("precision");
    const RunSpec cpu = std::get<RunSpec>(decode(Frame {MessageType::RunSpec, json::to_cbor(j)}));
    CHECK(cpu.cuda_devices.empty());
    CHECK(cpu.precision == Precision::Fp32);
    CHECK(toString(Precision::Fp32) == "fp32");
}

TEST_CASE(
    "the agent's kernels run on GPUs of their architectures' majors at or above them and on newer ones", "[protocol]")
{
    const CudaCapability cuda {true, "13.0", "13.0", "13.1.0", "not found", {80, 90}, ""};
    CHECK(cuda.runsOn(8, 0)); // A100: sm_80
    CHECK(cuda.runsOn(8, 6)); // RTX 30xx: sm_80's code runs on later minors of major 8
    CHECK(cuda.runsOn(8, 9)); // L4 / RTX 40xx
    CHECK(cuda.runsOn(9, 0)); // H100 / H200: sm_90
    CHECK(cuda.runsOn(10, 0)); // newer than every architecture: the PTX, compiled by the driver
    CHECK_FALSE(cuda.runsOn(7, 5)); // T4: older than sm_80
    CHECK_FALSE(cuda.runsOn(7, 0)); // V100
    CHECK_FALSE(CudaCapability {true, "13.0", "13.0", "", "", {86}, ""}.runsOn(8, 0)); // sm_86 code needs 8.6
    CHECK_FALSE(CudaCapability {}.runsOn(9, 0)); // no kernels at all
}

TEST_CASE("a NaN loss and extreme numbers travel exactly (CBOR, not JSON text)", "[protocol]")
{
    const Done done {DoneStatus::Failed, std::numeric_limits<double>::quiet_NaN(), 3, "loss diverged"};
    const Done back = std::get<Done>(decode(Frame {MessageType::Done, json::to_cbor(done.toJson())}));
    CHECK(std::isnan(back.final_loss));
    CHECK(back.status == DoneStatus::Failed);

    Heartbeat beat {1e-300, std::numeric_limits<std::int64_t>::max()};
    CHECK(std::get<Heartbeat>(decode(Frame {MessageType::Heartbeat, json::to_cbor(beat.toJson())})) == beat);
    Resume resume {std::numeric_limits<std::int64_t>::max()};
    CHECK(Resume::fromJson(resume.toJson()) == resume);
}

TEST_CASE("a stream of frames decodes the same however it is split", "[protocol]")
{
    std::vector<Message> messages = samples();
    const std::vector<Message> more = samples();
    messages.insert(messages.end(), more.begin(), more.end());
    const std::string bytes = stream(messages);

    const std::vector<Frame> whole = decodeInPieces(bytes, {});
    REQUIRE(whole.size() == messages.size());
    for (std::size_t i = 0; i < whole.size(); ++i)
        CHECK(decode(whole[i]) == messages[i]);

    SECTION("byte by byte")
    {
        CHECK(decodeInPieces(bytes, std::vector<std::size_t>(bytes.size(), 1)) == whole);
    }
    SECTION("in random pieces, empty ones included")
    {
        std::mt19937 rng(20240611);
        for (int trial = 0; trial < 200; ++trial)
            REQUIRE(decodeInPieces(bytes, randomPieces(bytes.size(), rng)) == whole);
    }
}

TEST_CASE("framing errors say what is wrong", "[protocol]")
{
    const std::string good = encode(Stop {"x"});

    SECTION("bad magic, with the bytes shown")
    {
        std::string bad = good;
        bad.replace(0, 4, "Welc");
        CHECK_THAT(streamError(bad), Contains("bad magic 57 65 6c 63 (\"Welc\")") && Contains("expected 50 57 41 47"));
        // Known as soon as four bytes are there: a shell's banner on the stream fails at once.
        FrameDecoder decoder;
        decoder.feed(std::string_view("Welc"));
        REQUIRE_THROWS_WITH(decoder.next(), Contains("bad magic"));
    }
    SECTION("unsupported version, both versions named")
    {
        std::string bad = good;
        putU16(bad, 4, 1); // a version 1 peer (before the Gloo key)
        CHECK_THAT(streamError(bad), Contains("unsupported protocol version 1 (this side speaks 7)"));
        putU16(bad, 4, 2); // a version 2 peer (GPUs as names, no CUDA device in the run spec)
        CHECK_THAT(streamError(bad), Contains("unsupported protocol version 2 (this side speaks 7)"));
        putU16(bad, 4, 3); // a version 3 peer (no clock probes)
        CHECK_THAT(streamError(bad), Contains("unsupported protocol version 3 (this side speaks 7)"));
        putU16(bad, 4, 4); // a version 4 peer (training settings loose in RunSpec, no progress in its heartbeats)
        CHECK_THAT(streamError(bad), Contains("unsupported protocol version 4 (this side speaks 7)"));
        putU16(bad, 4, 5); // a version 5 peer (no zero-bubble kinds: I and W spans would be unknown to it)
        CHECK_THAT(streamError(bad), Contains("unsupported protocol version 5 (this side speaks 7)"));
        putU16(bad, 4, 6); // a version 6 peer (the tied embedding summed inside the step, over another group)
        CHECK_THAT(streamError(bad), Contains("unsupported protocol version 6 (this side speaks 7)"));
    }
    SECTION("unknown message type")
    {
        std::string bad = good;
        putU16(bad, 6, 99);
        CHECK_THAT(streamError(bad), Contains("unknown message type 99"));
        putU16(bad, 6, 0);
        CHECK_THAT(streamError(bad), Contains("unknown message type 0"));
    }
    SECTION("oversized length, refused before the payload is awaited")
    {
        std::string header = good.substr(0, kHeaderSize);
        putU32(header, 8, kMaxPayload + 1);
        FrameDecoder decoder;
        decoder.feed(std::string_view(header).substr(0, 12));
        REQUIRE_THROWS_WITH(decoder.next(),
            Contains("Stop frame announces 67108865 payload bytes") && Contains("more than the limit of 67108864"));
    }
    SECTION("CRC mismatch")
    {
        std::string bad = good;
        bad.back() ^= 0x01;
        CHECK_THAT(streamError(bad), Contains("CRC mismatch in Stop frame") && Contains("header says 0x"));
    }
    SECTION("the decoder stays failed after an error")
    {
        std::string bad = good;
        bad.back() ^= 0x01;
        FrameDecoder decoder;
        decoder.feed(bad + good);
        REQUIRE_THROWS_WITH(decoder.next(), Contains("CRC mismatch"));
        REQUIRE_THROWS_WITH(decoder.next(), Contains("CRC mismatch"));
        REQUIRE_THROWS_WITH(decoder.finish(), Contains("CRC mismatch"));
    }
    SECTION("a payload over the limit is not sent")
    {
        const Frame big {MessageType::RendezvousSet, std::vector<std::uint8_t>(kMaxPayload + 1)};
        REQUIRE_THROWS_WITH(encodeFrame(big),
            "cannot send a RendezvousSet frame of 67108865 payload bytes: more "
            "than the limit of 67108864");
    }
}

TEST_CASE("a stream that ends inside a frame is an error at finish()", "[protocol]")
{
    const std::string good = encode(Stop {"the reason"});
    const std::size_t payload = good.size() - kHeaderSize;

    SECTION("inside the payload")
    {
        FrameDecoder decoder;
        decoder.feed(good + good.substr(0, good.size() - 3));
        REQUIRE(decoder.next());
        REQUIRE_FALSE(decoder.next());
        REQUIRE_THROWS_WITH(decoder.finish(),
            "stream ended inside a frame: header says " + std::to_string(payload) + " payload bytes, got "
                + std::to_string(payload - 3));
    }
    SECTION("inside the header")
    {
        FrameDecoder decoder;
        decoder.feed(good.substr(0, 10));
        REQUIRE_FALSE(decoder.next());
        REQUIRE_THROWS_WITH(decoder.finish(), "stream ended inside a frame: got 10 of 16 header bytes");
    }
    SECTION("at a frame boundary it is a clean end")
    {
        FrameDecoder decoder;
        decoder.feed(good);
        REQUIRE(decoder.next());
        REQUIRE_FALSE(decoder.next());
        REQUIRE_NOTHROW(decoder.finish());
    }
}

TEST_CASE("payload errors name the message and the field", "[protocol]")
{
    SECTION("malformed CBOR")
    {
        CHECK_THAT(messageError(MessageType::Stop, json()), Contains("Stop: payload is not a map (got null)"));
        REQUIRE_THROWS_WITH(
            decode(rawFrame(MessageType::Log, {0xA1, 0x61})), Contains("malformed CBOR in Log payload"));
        // Trailing bytes after the map are malformed too.
        REQUIRE_THROWS_WITH(decode(rawFrame(MessageType::Start, {0xA0, 0x00})), Contains("malformed CBOR in Start"));
        REQUIRE_THROWS_WITH(decode(rawFrame(MessageType::Start, {})), Contains("malformed CBOR in Start"));
    }
    SECTION("nesting too deep for the recursive copy, compare and print of a json value")
    {
        std::vector<std::uint8_t> deep(100000, 0x81); // [[[[...
        deep.push_back(0xA0);
        REQUIRE_THROWS_WITH(decode(rawFrame(MessageType::RunSpec, deep)), Contains("nested deeper than"));
    }
    SECTION("missing field")
    {
        json j = std::get<Hello>(samples()[0]).toJson();
        j.erase("host");
        CHECK(messageError(MessageType::Hello, j) == "Hello: missing field 'host'");
        j = hello().toJson();
        j["gpus"][1].erase("cc_major");
        CHECK(messageError(MessageType::Hello, j) == "Hello: missing field 'gpus[1].cc_major'");
        j = hello().toJson();
        j["cuda"].erase("nccl");
        CHECK(messageError(MessageType::Hello, j) == "Hello: missing field 'cuda.nccl'");
    }
    SECTION("ill-typed fields")
    {
        json j = runSpec().toJson();
        j["training"]["lr"] = "fast";
        CHECK(messageError(MessageType::RunSpec, j) == "RunSpec: field 'training.lr': expected a number, got string");
        j = runSpec().toJson();
        j["devices"][1] = -1;
        CHECK(messageError(MessageType::RunSpec, j)
            == "RunSpec: field 'devices[1]': integer -1 out of range [0, "
                + std::to_string(std::numeric_limits<int>::max()) + "]");
        j = runSpec().toJson();
        j["training"]["data"]["kind"] = "images";
        CHECK(messageError(MessageType::RunSpec, j)
            == "RunSpec: field 'training.data.kind': unknown value 'images' (expected one of synthetic, tokens, text)");
        j = runSpec().toJson();
        j["training"]["data"] = 3;
        CHECK(messageError(MessageType::RunSpec, j) == "RunSpec: field 'training.data' is not a map (got number)");
        j = runSpec().toJson();
        j["training"]["steps"] = 1.5;
        CHECK(messageError(MessageType::RunSpec, j)
            == "RunSpec: field 'training.steps': expected an integer, got number");
        j = runSpec().toJson();
        j["training"]["warmup_steps"] = -1;
        CHECK_THAT(messageError(MessageType::RunSpec, j),
            Contains("RunSpec: field 'training.warmup_steps': integer -1 out of range [0, "));
        j = runSpec().toJson();
        j["training"].erase("cosine");
        CHECK(messageError(MessageType::RunSpec, j) == "RunSpec: missing field 'training.cosine'");
        j = runSpec().toJson();
        j["training"] = json::array();
        CHECK(messageError(MessageType::RunSpec, j) == "RunSpec: field 'training' is not a map (got array)");
        j = std::get<Hello>(samples()[0]).toJson();
        j["cores"] = std::uint64_t(1) << 40;
        CHECK_THAT(messageError(MessageType::Hello, j), Contains("Hello: field 'cores': integer 1099511627776 out of"));
        j["cores"] = 4;
        j["gpus"] = json::array({hello().toJson()["gpus"][0], "NVIDIA H100"}); // a version 2 agent's GPU names
        CHECK(messageError(MessageType::Hello, j) == "Hello: field 'gpus[1]' is not a map (got string)");
        j = hello().toJson();
        j["gpus"][0]["free_bytes"] = -2;
        CHECK_THAT(messageError(MessageType::Hello, j),
            Contains("Hello: field 'gpus[0].free_bytes': integer -2 out of range"));
        j = hello().toJson();
        j["cuda"]["compiled_in"] = 1;
        CHECK(messageError(MessageType::Hello, j) == "Hello: field 'cuda.compiled_in': expected a boolean, got number");
        j = hello().toJson();
        j["cuda"]["architectures"][1] = "sm_90";
        CHECK(messageError(MessageType::Hello, j)
            == "Hello: field 'cuda.architectures[1]': expected an integer, got string");
        j = runSpec().toJson();
        j["cuda_devices"][1] = -2;
        CHECK_THAT(messageError(MessageType::RunSpec, j), Contains("RunSpec: field 'cuda_devices[1]': integer -2 out"));
        j = runSpec().toJson();
        j["precision"] = "fp16";
        CHECK(messageError(MessageType::RunSpec, j)
            == "RunSpec: field 'precision': unknown value 'fp16' (expected one of fp32, bf16)");
    }
    SECTION("rendezvous values are byte strings, not text")
    {
        CHECK(messageError(MessageType::RendezvousSet, {{"key", "k"}, {"value", "text"}})
            == "RendezvousSet: field 'value': expected a byte string, got string");
    }
    SECTION("telemetry spans and metrics")
    {
        json j = telemetry().toJson();
        j["spans"][1] = json::array({1, 2, 3});
        CHECK(
            messageError(MessageType::Telemetry, j) == "Telemetry: field 'spans[1]': expected an array of 11 numbers");
        j = telemetry().toJson();
        j["spans"][0][1] = 9;
        CHECK(messageError(MessageType::Telemetry, j) == "Telemetry: field 'spans[0]': unknown lane 9");
        j = telemetry().toJson();
        j["spans"][2][7] = "late";
        CHECK(
            messageError(MessageType::Telemetry, j) == "Telemetry: field 'spans[2][7]': expected a number, got string");
        j = telemetry().toJson();
        j["metrics"][1].erase("value");
        CHECK(messageError(MessageType::Telemetry, j) == "Telemetry: missing field 'metrics[1].value'");
        j = telemetry().toJson();
        j["seq"] = 0;
        CHECK_THAT(messageError(MessageType::Telemetry, j), Contains("Telemetry: field 'seq': integer 0 out of range"));
    }
    SECTION("fields a newer peer adds are ignored")
    {
        json j = Stop {"why"}.toJson();
        j["since"] = 12;
        CHECK(messageError(MessageType::Stop, j).empty());
    }
}

TEST_CASE("FrameReader and FrameWriter over a pipe, two writer threads", "[protocol]")
{
    std::signal(SIGPIPE, SIG_IGN); // a reader that gave up must surface as EPIPE in the writers, not kill the test
    int fds[2];
    REQUIRE(::pipe(fds) == 0);

    // Frames larger than PIPE_BUF are written in several pieces: without FrameWriter's lock they would interleave.
    constexpr int kPerThread = 40;
    FrameWriter writer(fds[1]);
    std::vector<std::string> writerErrors(2);
    auto produce = [&](int thread) {
        try {
            for (int i = 0; i < kPerThread; ++i)
                writer.write(encode(RendezvousSet {std::to_string(thread) + "/" + std::to_string(i),
                    std::vector<std::uint8_t>(70000 + i, std::uint8_t(thread))}));
        } catch (const std::exception& e) {
            writerErrors[thread] = e.what();
        }
    };
    std::thread a(produce, 0);
    std::thread b(produce, 1);

    std::vector<RendezvousSet> received;
    std::string readError;
    FrameReader reader(fds[0]);
    try {
        for (int i = 0; i < 2 * kPerThread; ++i)
            if (auto frame = reader.read())
                received.push_back(std::get<RendezvousSet>(decode(*frame)));
    } catch (const std::exception& e) {
        readError = e.what();
        ::close(fds[0]);
    }
    a.join();
    b.join();
    ::close(fds[1]);
    REQUIRE(readError.empty());
    CHECK(writerErrors == std::vector<std::string>(2));
    CHECK_FALSE(reader.read()); // clean EOF between frames
    ::close(fds[0]);

    REQUIRE(received.size() == 2 * kPerThread);
    std::vector<int> nextOf(2, 0);
    for (const RendezvousSet& m : received) {
        const int thread = m.key[0] - '0';
        REQUIRE(m.key == std::to_string(thread) + "/" + std::to_string(nextOf[thread])); // each thread's order kept
        REQUIRE(m.value == std::vector<std::uint8_t>(70000 + nextOf[thread], std::uint8_t(thread)));
        ++nextOf[thread];
    }
}

TEST_CASE("FrameReader reports a peer that died mid-frame", "[protocol]")
{
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const std::string frame = encode(Heartbeat {1.5, 2});
    writeAll(fds[1], frame);
    writeAll(fds[1], std::string_view(frame).substr(0, frame.size() - 2));
    ::close(fds[1]);
    FrameReader reader(fds[0]);
    REQUIRE(reader.read());
    REQUIRE_THROWS_WITH(reader.read(), Contains("stream ended inside a frame: header says"));
    ::close(fds[0]);
}

namespace {

/// One mutation of a stream of valid frames, as the fuzz driver does: bit flips, truncation, inserted bytes,
/// header field edits, and payload edits with the CRC fixed so that CBOR and field checks get exercised too.
void mutate(std::string& s, std::mt19937& rng)
{
    auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
    if (s.empty()) {
        s.push_back(static_cast<char>(rng()));
        return;
    }
    switch (pick(6)) {
    case 0:
        s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
    case 1:
        s.resize(pick(s.size()));
        break;
    case 2:
        s.insert(pick(s.size() + 1), std::string(1 + pick(8), static_cast<char>(rng())));
        break;
    case 3: { // a header field of the first frame: length, type or version
        if (s.size() < kHeaderSize)
            break;
        const std::uint32_t values[]
            = {0, 1, std::uint32_t(s.size()), kMaxPayload, kMaxPayload + 1, 0xFFFFFFFF, std::uint32_t(rng())};
        const std::size_t field = pick(3);
        if (field == 0)
            putU32(s, 8, values[pick(std::size(values))]);
        else
            putU16(s, field == 1 ? 6 : 4, static_cast<std::uint16_t>(values[pick(std::size(values))] % 20));
        break;
    }
    default: { // a payload byte of the first frame, CRC fixed
        if (s.size() <= kHeaderSize)
            break;
        const std::size_t length = std::min<std::size_t>(s.size() - kHeaderSize, getU32(s, 8));
        if (length == 0)
            break;
        s[kHeaderSize + pick(length)] = static_cast<char>(rng());
        putU32(s, 12, crc32({reinterpret_cast<const std::uint8_t*>(s.data()) + kHeaderSize, length}));
    }
    }
}

} // namespace

TEST_CASE("bounded mutation fuzz: every mutated stream decodes or throws ProtocolError", "[protocol]")
{
    const std::vector<Message> messages = samples();
    std::mt19937 rng(12345);
    int decoded = 0;
    int refused = 0;
    for (int run = 0; run < 20000; ++run) {
        std::string s;
        for (int n = 1 + int(rng() % 3); n > 0; --n)
            s += encode(messages[rng() % messages.size()]);
        for (int n = 1 + int(rng() % 4); n > 0; --n)
            mutate(s, rng);
        try {
            for (const Frame& frame : decodeInPieces(s, randomPieces(s.size(), rng)))
                decode(frame);
            ++decoded;
        } catch (const ProtocolError&) {
            ++refused;
        } // anything else escapes and fails the test
    }
    INFO("decoded " << decoded << ", refused " << refused);
    CHECK(decoded > 100); // CRC-fixed payload edits that keep a valid message, and edits that cancel out
    CHECK(refused > 10000);
}
