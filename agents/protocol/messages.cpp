// SPDX-License-Identifier: MIT
#include "messages.h"

#include <array>
#include <cmath>
#include <limits>
#include <utility>

namespace pw::agents {

using nlohmann::json;

namespace {

constexpr std::array<std::string_view, 3> kDataKindNames = {"synthetic", "tokens", "text"};
constexpr std::array<std::string_view, 3> kTransportNames = {"gloo", "local", "nccl"};
constexpr std::array<std::string_view, 2> kPrecisionNames = {"fp32", "bf16"};
constexpr std::array<std::string_view, 4> kLogLevelNames = {"debug", "info", "warning", "error"};
constexpr std::array<std::string_view, 3> kDoneStatusNames = {"succeeded", "failed", "stopped"};
constexpr int kLaneCount = static_cast<int>(planner::Lane::Collective) + 1;
// BackwardInput is the last kind (appended for zero-bubble schedules, protocol version 6).
constexpr int kActionKindCount = static_cast<int>(planner::ActionKind::BackwardInput) + 1;
constexpr std::size_t kSpanFields = 11;

/// Nesting allowed in a payload. Our messages nest a few levels (the plan a few more); copying, comparing or
/// printing an nlohmann value recurses, so a corrupt payload nested millions deep must be refused before that.
constexpr std::size_t kMaxDepth = 128;

std::string typeName(const json& j)
{
    return j.is_binary() ? "byte string" : j.type_name();
}

/// @brief Reads the fields of one message's map, throwing ProtocolError "Message: field 'name': ..." for a
/// missing or ill-typed one. Nested maps get a reader whose field names carry the prefix ("data.kind").
class Fields
{
public:
    Fields(const json& j, MessageType type, std::string prefix = {})
        : m_j(j)
        , m_type(type)
        , m_prefix(std::move(prefix))
    {
        if (!j.is_object())
            throw ProtocolError(toString(type) + ": "
                + (m_prefix.empty() ? "payload" : "field '" + m_prefix.substr(0, m_prefix.size() - 1) + "'")
                + " is not a map (got " + typeName(j) + ")");
    }

    [[noreturn]] void fail(std::string_view key, const std::string& what) const
    {
        throw ProtocolError(toString(m_type) + ": field '" + m_prefix + std::string(key) + "': " + what);
    }

    const json& get(std::string_view key) const
    {
        auto it = m_j.find(key);
        if (it == m_j.end())
            throw ProtocolError(toString(m_type) + ": missing field '" + m_prefix + std::string(key) + "'");
        return *it;
    }

    std::string string(std::string_view key) const { return checkedString(key, get(key)); }
    std::string stringOr(std::string_view key, std::string fallback) const
    {
        return m_j.contains(key) ? string(key) : fallback;
    }
    std::vector<std::uint8_t> bytesOr(std::string_view key) const
    {
        return m_j.contains(key) ? bytes(key) : std::vector<std::uint8_t> {};
    }
    double number(std::string_view key) const { return checkedNumber(key, get(key)); }
    bool boolean(std::string_view key) const
    {
        const json& v = get(key);
        if (!v.is_boolean())
            fail(key, "expected a boolean, got " + typeName(v));
        return v.get<bool>();
    }
    template <class Int> Int integer(std::string_view key, Int min = std::numeric_limits<Int>::min()) const
    {
        return checkedInteger<Int>(key, get(key), min);
    }
    const json& array(std::string_view key) const
    {
        const json& v = get(key);
        if (!v.is_array())
            fail(key, "expected an array, got " + typeName(v));
        return v;
    }
    std::vector<std::string> strings(std::string_view key) const
    {
        std::vector<std::string> out;
        for (const json& v : array(key))
            out.push_back(checkedString(elementName(key, out.size()), v));
        return out;
    }
    std::vector<std::uint8_t> bytes(std::string_view key) const
    {
        const json& v = get(key);
        if (!v.is_binary())
            fail(key, "expected a byte string, got " + typeName(v));
        return v.get_binary();
    }
    Fields object(std::string_view key) const { return Fields(get(key), m_type, m_prefix + std::string(key) + "."); }
    template <class Enum, std::size_t N>
    Enum enumeration(std::string_view key, const std::array<std::string_view, N>& names) const
    {
        const std::string name = string(key);
        std::string expected;
        for (std::size_t i = 0; i < N; ++i) {
            if (names[i] == name)
                return static_cast<Enum>(i);
            expected += (i ? ", " : "") + std::string(names[i]);
        }
        fail(key, "unknown value '" + name + "' (expected one of " + expected + ")");
    }

    static std::string elementName(std::string_view key, std::size_t index)
    {
        return std::string(key) + "[" + std::to_string(index) + "]";
    }
    std::string checkedString(std::string_view key, const json& v) const
    {
        if (!v.is_string())
            fail(key, "expected a string, got " + typeName(v));
        return v.get<std::string>();
    }
    double checkedNumber(std::string_view key, const json& v) const
    {
        if (!v.is_number())
            fail(key, "expected a number, got " + typeName(v));
        return v.get<double>();
    }
    template <class Int>
    Int checkedInteger(std::string_view key, const json& v, Int min = std::numeric_limits<Int>::min()) const
    {
        // Unsigned first: CBOR's positive integers arrive as number_unsigned and may exceed int64.
        if (v.is_number_unsigned()) {
            const auto u = v.get<std::uint64_t>();
            if (u <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max())
                && (min <= 0 || u >= std::uint64_t(min)))
                return static_cast<Int>(u);
        } else if (v.is_number_integer()) {
            const auto s = v.get<std::int64_t>();
            if (s >= static_cast<std::int64_t>(min)
                && (s < 0 || static_cast<std::uint64_t>(s) <= std::uint64_t(std::numeric_limits<Int>::max())))
                return static_cast<Int>(s);
        } else {
            fail(key, "expected an integer, got " + typeName(v));
        }
        fail(key,
            "integer " + v.dump() + " out of range [" + std::to_string(min) + ", "
                + std::to_string(std::numeric_limits<Int>::max()) + "]");
    }

private:
    const json& m_j;
    MessageType m_type;
    std::string m_prefix;
};

/// @brief SAX pass over a payload before it is built into a json value: refuses deep nesting and turns CBOR
/// syntax errors into ProtocolError.
class DepthCheck : public nlohmann::json_sax<json>
{
public:
    explicit DepthCheck(MessageType type)
        : m_type(type)
    {
    }
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool key(string_t&) override { return true; }
    bool start_object(std::size_t) override { return enter(); }
    bool start_array(std::size_t) override { return enter(); }
    bool end_object() override { return leave(); }
    bool end_array() override { return leave(); }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override
    {
        throw ProtocolError("malformed CBOR in " + toString(m_type) + " payload: " + e.what());
    }

private:
    bool enter()
    {
        if (++m_depth > kMaxDepth)
            throw ProtocolError("malformed CBOR in " + toString(m_type) + " payload: nested deeper than "
                + std::to_string(kMaxDepth) + " levels");
        return true;
    }
    bool leave()
    {
        --m_depth;
        return true;
    }

    MessageType m_type;
    std::size_t m_depth = 0;
};

json parseCbor(const Frame& frame)
{
    DepthCheck check(frame.type);
    json::sax_parse(frame.payload.begin(), frame.payload.end(), &check, json::input_format_t::cbor);
    try {
        return json::from_cbor(frame.payload);
    } catch (const json::exception& e) {
        throw ProtocolError("malformed CBOR in " + toString(frame.type) + " payload: " + e.what());
    }
}

json spanToJson(const planner::Span& s)
{
    return json::array({s.device, static_cast<int>(s.lane), static_cast<int>(s.kind), s.stage, s.microbatch, s.action,
        s.t0, s.t1, s.peer, s.weight_version, s.bytes});
}

planner::Span spanFromJson(const Fields& f, std::string_view name, const json& a)
{
    if (!a.is_array() || a.size() != kSpanFields)
        f.fail(name, "expected an array of " + std::to_string(kSpanFields) + " numbers");
    auto i32 = [&](std::size_t i) { return f.checkedInteger<std::int32_t>(Fields::elementName(name, i), a[i]); };
    auto num = [&](std::size_t i) { return f.checkedNumber(Fields::elementName(name, i), a[i]); };
    planner::Span s;
    s.device = i32(0);
    const int lane = i32(1);
    const int kind = i32(2);
    if (lane < 0 || lane >= kLaneCount)
        f.fail(name, "unknown lane " + std::to_string(lane));
    if (kind < 0 || kind >= kActionKindCount)
        f.fail(name, "unknown action kind " + std::to_string(kind));
    s.lane = static_cast<planner::Lane>(lane);
    s.kind = static_cast<planner::ActionKind>(kind);
    s.stage = i32(3);
    s.microbatch = i32(4);
    s.action = i32(5);
    s.t0 = num(6);
    s.t1 = num(7);
    s.peer = i32(8);
    s.weight_version = i32(9);
    s.bytes = num(10);
    return s;
}

json metricToJson(const Metric& m)
{
    return {{"step", m.step}, {"name", m.name}, {"value", m.value}, {"t_s", m.t_s}, {"device", m.device}};
}

Metric metricFromJson(const Fields& f)
{
    return {f.integer<std::int64_t>("step"), f.string("name"), f.number("value"), f.number("t_s"),
        f.integer<std::int32_t>("device")};
}

json binary(const std::vector<std::uint8_t>& bytes)
{
    return json::binary(bytes);
}

template <class T> Message decodeAs(const json& j)
{
    return T::fromJson(j);
}

template <std::size_t... I> constexpr auto makeDecoders(std::index_sequence<I...>)
{
    // The variant's order is the wire codes' order: the table below relies on it.
    static_assert(((static_cast<std::size_t>(std::variant_alternative_t<I, Message>::kType) == I + 1) && ...));
    return std::array<Message (*)(const json&), sizeof...(I)> {&decodeAs<std::variant_alternative_t<I, Message>>...};
}
constexpr auto kDecoders = makeDecoders(std::make_index_sequence<std::variant_size_v<Message>>());
static_assert(kDecoders.size() == kMessageTypeCount, "one Message alternative per MessageType");

} // namespace

std::string_view toString(DataKind kind)
{
    return kDataKindNames.at(static_cast<std::size_t>(kind));
}
std::string_view toString(Precision precision)
{
    return kPrecisionNames.at(static_cast<std::size_t>(precision));
}
std::string_view toString(Transport transport)
{
    return kTransportNames.at(static_cast<std::size_t>(transport));
}
std::string_view toString(LogLevel level)
{
    return kLogLevelNames.at(static_cast<std::size_t>(level));
}
std::string_view toString(DoneStatus status)
{
    return kDoneStatusNames.at(static_cast<std::size_t>(status));
}

// ---- Hello ----

bool CudaCapability::runsOn(int cc_major, int cc_minor) const
{
    const int sm = cc_major * 10 + cc_minor;
    bool newer = !architectures.empty();
    for (int a : architectures) {
        if (a / 10 == cc_major && a <= sm)
            return true; // binary code of the same major runs on its later minors
        newer = newer && a < sm;
    }
    return newer; // a later major: the PTX, compiled by the driver
}

json Hello::toJson() const
{
    json gpusJson = json::array();
    for (const GpuCapability& g : gpus)
        gpusJson.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
            {"free_bytes", g.free_bytes}, {"cc_major", g.cc_major}, {"cc_minor", g.cc_minor}});
    const json cudaJson = {{"compiled_in", cuda.compiled_in}, {"runtime", cuda.runtime}, {"driver", cuda.driver},
        {"cublas", cuda.cublas}, {"nccl", cuda.nccl}, {"architectures", cuda.architectures}, {"error", cuda.error}};
    return {{"protocol_version", protocol_version}, {"agent_version", agent_version}, {"host", host}, {"pid", pid},
        {"cores", cores}, {"memory_bytes", memory_bytes}, {"backends", backends}, {"gpus", std::move(gpusJson)},
        {"blas", blas}, {"cuda", cudaJson}};
}

Hello Hello::fromJson(const json& j)
{
    const Fields f(j, kType);
    Hello h;
    h.protocol_version = f.integer<int>("protocol_version", 0);
    h.agent_version = f.string("agent_version");
    h.host = f.string("host");
    h.pid = f.integer<std::int64_t>("pid", 0);
    h.cores = f.integer<int>("cores", 0);
    h.memory_bytes = f.integer<std::int64_t>("memory_bytes", 0);
    h.backends = f.strings("backends");
    for (const json& g : f.array("gpus")) {
        const Fields gf(g, kType, Fields::elementName("gpus", h.gpus.size()) + ".");
        h.gpus.push_back({gf.integer<int>("index", 0), gf.string("name"), gf.integer<std::int64_t>("memory_bytes", 0),
            gf.integer<std::int64_t>("free_bytes", -1), gf.integer<int>("cc_major", 0),
            gf.integer<int>("cc_minor", 0)});
    }
    h.blas = f.string("blas");
    const Fields c = f.object("cuda");
    h.cuda.compiled_in = c.boolean("compiled_in");
    h.cuda.runtime = c.string("runtime");
    h.cuda.driver = c.string("driver");
    h.cuda.cublas = c.string("cublas");
    h.cuda.nccl = c.string("nccl");
    for (const json& a : c.array("architectures"))
        h.cuda.architectures.push_back(
            c.checkedInteger<int>(Fields::elementName("architectures", h.cuda.architectures.size()), a, 0));
    h.cuda.error = c.string("error");
    return h;
}

// ---- RunSpec ----

namespace {
json trainingToJson(const TrainingOptions& t)
{
    const json dataJson = {{"kind", toString(t.data.kind)}, {"path", t.data.path}, {"seed", t.data.seed}};
    return {{"steps", t.steps}, {"data", dataJson}, {"init_checkpoint", t.init_checkpoint},
        {"save_checkpoint", t.save_checkpoint}, {"lr", t.lr}, {"weight_decay", t.weight_decay},
        {"warmup_steps", t.warmup_steps}, {"cosine", t.cosine}, {"seed", t.seed}};
}
} // namespace

json RunSpec::toJson() const
{
    return {{"run_id", run_id}, {"agent", agent}, {"plan", plan}, {"devices", devices}, {"cuda_devices", cuda_devices},
        {"precision", toString(precision)}, {"training", trainingToJson(training)}, {"threads", threads},
        {"journal_path", journal_path}, {"transport", toString(transport)}, {"telemetry_batch", telemetry_batch},
        {"gloo_host", gloo_host}, {"gloo_secret", binary(gloo_secret)}};
}

namespace {
DataSpec dataFromJson(const Fields& f)
{
    DataSpec d;
    d.kind = f.enumeration<DataKind>("kind", kDataKindNames);
    d.path = f.string("path");
    d.seed = f.integer<std::uint64_t>("seed");
    return d;
}

TrainingOptions trainingFromJson(const Fields& f)
{
    TrainingOptions t;
    t.steps = f.integer<int>("steps", 0);
    t.data = dataFromJson(f.object("data"));
    t.init_checkpoint = f.stringOr("init_checkpoint", "");
    t.save_checkpoint = f.stringOr("save_checkpoint", "");
    t.lr = f.number("lr");
    t.weight_decay = f.number("weight_decay");
    t.warmup_steps = f.integer<int>("warmup_steps", 0);
    t.cosine = f.boolean("cosine");
    t.seed = f.integer<std::uint64_t>("seed");
    return t;
}

std::vector<int> indicesFromJson(const Fields& f, std::string_view key, int min)
{
    std::vector<int> out;
    for (const json& v : f.array(key))
        out.push_back(f.checkedInteger<int>(Fields::elementName(key, out.size()), v, min));
    return out;
}
} // namespace

RunSpec RunSpec::fromJson(const json& j)
{
    const Fields f(j, kType);
    RunSpec r;
    r.run_id = f.string("run_id");
    r.agent = f.string("agent");
    r.plan = f.get("plan");
    r.devices = indicesFromJson(f, "devices", 0);
    // Absent (a controller that puts every device on the CPU may leave them out): the CPU, in fp32.
    if (j.contains("cuda_devices"))
        r.cuda_devices = indicesFromJson(f, "cuda_devices", -1);
    if (j.contains("precision"))
        r.precision = f.enumeration<Precision>("precision", kPrecisionNames);
    r.training = trainingFromJson(f.object("training"));
    r.threads = f.integer<int>("threads", 0);
    r.journal_path = f.string("journal_path");
    r.transport = f.enumeration<Transport>("transport", kTransportNames);
    r.telemetry_batch = f.integer<int>("telemetry_batch", 1);
    r.gloo_host = f.stringOr("gloo_host", "");
    r.gloo_secret = f.bytesOr("gloo_secret");
    return r;
}

// ---- rendezvous ----

json RendezvousSet::toJson() const
{
    return {{"key", key}, {"value", binary(value)}};
}
RendezvousSet RendezvousSet::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.string("key"), f.bytes("value")};
}

json RendezvousGet::toJson() const
{
    return {{"key", key}};
}
RendezvousGet RendezvousGet::fromJson(const json& j)
{
    return {Fields(j, kType).string("key")};
}

json RendezvousValue::toJson() const
{
    return {{"key", key}, {"value", binary(value)}};
}
RendezvousValue RendezvousValue::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.string("key"), f.bytes("value")};
}

// ---- control ----

json Start::toJson() const
{
    return json::object();
}
Start Start::fromJson(const json& j)
{
    static_cast<void>(Fields(j, kType)); // a map, possibly with fields of a newer peer
    return {};
}

json Stop::toJson() const
{
    return {{"reason", reason}};
}
Stop Stop::fromJson(const json& j)
{
    return {Fields(j, kType).string("reason")};
}

json Resume::toJson() const
{
    return {{"from_seq", from_seq}};
}
Resume Resume::fromJson(const json& j)
{
    return {Fields(j, kType).integer<std::int64_t>("from_seq", 0)};
}

// ---- Telemetry ----

json Telemetry::toJson() const
{
    json spansJson = json::array();
    for (const planner::Span& s : spans)
        spansJson.push_back(spanToJson(s));
    json metricsJson = json::array();
    for (const Metric& m : metrics)
        metricsJson.push_back(metricToJson(m));
    return {{"agent", agent}, {"seq", seq}, {"first_span", first_span}, {"spans", std::move(spansJson)},
        {"metrics", std::move(metricsJson)}};
}

Telemetry Telemetry::fromJson(const json& j)
{
    const Fields f(j, kType);
    Telemetry t;
    t.agent = f.string("agent");
    t.seq = f.integer<std::int64_t>("seq", 1);
    t.first_span = f.integer<std::int64_t>("first_span", 1);
    for (const json& s : f.array("spans"))
        t.spans.push_back(spanFromJson(f, Fields::elementName("spans", t.spans.size()), s));
    for (const json& m : f.array("metrics"))
        t.metrics.push_back(metricFromJson(Fields(m, kType, Fields::elementName("metrics", t.metrics.size()) + ".")));
    return t;
}

// ---- status ----

json Heartbeat::toJson() const
{
    json devicesJson = json::array();
    for (const DeviceProgress& d : devices)
        devicesJson.push_back(
            {{"device", d.device}, {"finished", d.finished}, {"busy", d.busy}, {"action", spanToJson(d.action)}});
    return {{"t_s", t_s}, {"step", step}, {"devices", std::move(devicesJson)}};
}
Heartbeat Heartbeat::fromJson(const json& j)
{
    const Fields f(j, kType);
    Heartbeat h {f.number("t_s"), f.integer<std::int64_t>("step"), {}};
    for (const json& d : f.array("devices")) {
        const std::string name = Fields::elementName("devices", h.devices.size());
        const Fields g(d, kType, name + ".");
        h.devices.push_back({g.integer<std::int32_t>("device"), g.integer<std::int64_t>("finished", 0),
            g.boolean("busy"), spanFromJson(g, "action", g.get("action"))});
    }
    return h;
}

json ClockProbe::toJson() const
{
    return {{"id", id}, {"controller_t_s", controller_t_s}};
}
ClockProbe ClockProbe::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.integer<std::int64_t>("id"), f.number("controller_t_s")};
}

json ClockReply::toJson() const
{
    return {{"id", id}, {"controller_t_s", controller_t_s}, {"agent_t_s", agent_t_s}};
}
ClockReply ClockReply::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.integer<std::int64_t>("id"), f.number("controller_t_s"), f.number("agent_t_s")};
}

json FlightRecorderAsk::toJson() const
{
    return {{"reason", reason}};
}
FlightRecorderAsk FlightRecorderAsk::fromJson(const json& j)
{
    return {Fields(j, kType).string("reason")};
}

json FlightRecorder::toJson() const
{
    json actionsJson = json::array();
    for (const planner::Span& s : actions)
        actionsJson.push_back(spanToJson(s));
    return {{"agent", agent}, {"t_s", t_s}, {"actions", std::move(actionsJson)}};
}
FlightRecorder FlightRecorder::fromJson(const json& j)
{
    const Fields f(j, kType);
    FlightRecorder r {f.string("agent"), f.number("t_s"), {}};
    for (const json& s : f.array("actions"))
        r.actions.push_back(spanFromJson(f, Fields::elementName("actions", r.actions.size()), s));
    return r;
}

json Log::toJson() const
{
    return {{"level", toString(level)}, {"text", text}, {"t_s", t_s}};
}
Log Log::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.enumeration<LogLevel>("level", kLogLevelNames), f.string("text"), f.number("t_s")};
}

json Error::toJson() const
{
    return {{"message", message}, {"fatal", fatal}};
}
Error Error::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.string("message"), f.boolean("fatal")};
}

json Done::toJson() const
{
    return {{"status", toString(status)}, {"final_loss", final_loss}, {"steps", steps}, {"message", message}};
}
Done Done::fromJson(const json& j)
{
    const Fields f(j, kType);
    return {f.enumeration<DoneStatus>("status", kDoneStatusNames), f.number("final_loss"),
        f.integer<std::int64_t>("steps", 0), f.string("message")};
}

// ---- any message ----

MessageType typeOf(const Message& message)
{
    return static_cast<MessageType>(message.index() + 1);
}

Message decode(const Frame& frame)
{
    if (!messageTypeFromCode(static_cast<std::uint16_t>(frame.type)))
        throw ProtocolError("unknown message type " + std::to_string(static_cast<std::uint16_t>(frame.type)));
    return kDecoders[static_cast<std::size_t>(frame.type) - 1](parseCbor(frame));
}

std::string encode(const Message& message)
{
    return std::visit([](const auto& m) { return encodeFrame(m.kType, m.toJson()); }, message);
}

} // namespace pw::agents
