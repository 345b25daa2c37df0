// SPDX-License-Identifier: MIT
// Algorithm-specific options: checking PartitionOptions::params against a partitioner's specs.
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>

#include "../errors.h"
#include "partitioner.h"

namespace pw::planner {

using nlohmann::json;

namespace {

const OptionSpec* findSpec(const std::vector<OptionSpec>& specs, std::string_view name)
{
    for (const auto& s : specs)
        if (s.name == name)
            return &s;
    return nullptr;
}

std::string numberText(double v)
{
    if (v == std::floor(v) && std::abs(v) < 1e15)
        return std::to_string(static_cast<long long>(v));
    return std::to_string(v);
}

std::string boundsText(const OptionSpec& spec)
{
    if (spec.min && spec.max)
        return " in [" + numberText(*spec.min) + ", " + numberText(*spec.max) + "]";
    if (spec.min)
        return " >= " + numberText(*spec.min);
    if (spec.max)
        return " <= " + numberText(*spec.max);
    return {};
}

bool inRange(const OptionSpec& spec, double v)
{
    return std::isfinite(v) && (!spec.min || v >= *spec.min) && (!spec.max || v <= *spec.max);
}

bool isInteger(const json& v)
{
    if (v.is_number_integer())
        return true;
    if (v.is_number_float()) {
        const double d = v.get<double>();
        return std::isfinite(d) && d == std::floor(d) && std::abs(d) < 2e9;
    }
    return false;
}

/// Empty when `v` suits `spec`, else what is wrong.
std::string problem(const OptionSpec& spec, const json& v)
{
    const std::string want = describeType(spec);
    switch (spec.type) {
    case OptionSpec::Type::Integer:
        if (!isInteger(v) || !inRange(spec, v.get<double>()))
            return "must be an " + want + ", got " + v.dump();
        return {};
    case OptionSpec::Type::Number:
        if (!v.is_number() || !inRange(spec, v.get<double>()))
            return "must be a " + want + ", got " + v.dump();
        return {};
    case OptionSpec::Type::Boolean:
        if (!v.is_boolean())
            return "must be true or false, got " + v.dump();
        return {};
    case OptionSpec::Type::Choice:
        if (v.is_string())
            for (const auto& c : spec.choices)
                if (c == v.get<std::string>())
                    return {};
        return "must be " + want + ", got " + v.dump();
    case OptionSpec::Type::IntegerList:
        if (!v.is_array() || v.empty())
            return "must be a non-empty list of integers" + boundsText(spec) + ", got " + v.dump();
        for (const auto& e : v)
            if (!isInteger(e) || !inRange(spec, e.get<double>()))
                return "must be a list of integers" + boundsText(spec) + ", got " + v.dump();
        return {};
    }
    return "has an unknown type";
}

} // namespace

std::string describeType(const OptionSpec& spec)
{
    switch (spec.type) {
    case OptionSpec::Type::Integer:
        return "integer" + boundsText(spec);
    case OptionSpec::Type::Number:
        return "number" + boundsText(spec);
    case OptionSpec::Type::Boolean:
        return "true|false";
    case OptionSpec::Type::Choice: {
        std::string s = "one of ";
        for (std::size_t i = 0; i < spec.choices.size(); ++i)
            s += (i ? "|" : "") + spec.choices[i];
        return s;
    }
    case OptionSpec::Type::IntegerList:
        return "comma-separated integers" + boundsText(spec);
    }
    return "value";
}

json parseOptionValue(const OptionSpec& spec, std::string_view text)
{
    const auto bad
        = [&](const std::string& why) { return InputError({}, 0, spec.name, "'" + std::string(text) + "' " + why); };
    const auto parseInt = [&](std::string_view t) {
        long long v = 0;
        const auto* end = t.data() + t.size();
        const auto [ptr, ec] = std::from_chars(t.data(), end, v);
        if (ec != std::errc() || ptr != end || v < -2'000'000'000LL || v > 2'000'000'000LL)
            throw bad("is not an integer");
        return v;
    };
    json v;
    switch (spec.type) {
    case OptionSpec::Type::Integer:
        v = parseInt(text);
        break;
    case OptionSpec::Type::Number: {
        try {
            std::size_t used = 0;
            const std::string s(text);
            const double d = std::stod(s, &used);
            if (used != s.size())
                throw bad("is not a number");
            v = d;
        } catch (const std::logic_error&) {
            throw bad("is not a number");
        }
        break;
    }
    case OptionSpec::Type::Boolean:
        if (text == "true" || text == "1" || text == "yes" || text == "on")
            v = true;
        else if (text == "false" || text == "0" || text == "no" || text == "off")
            v = false;
        else
            throw bad("is not true or false");
        break;
    case OptionSpec::Type::Choice:
        v = std::string(text);
        break;
    case OptionSpec::Type::IntegerList: {
        v = json::array();
        std::size_t pos = 0;
        while (pos <= text.size()) {
            const auto comma = text.find(',', pos);
            const auto item = text.substr(pos, comma == std::string_view::npos ? text.size() - pos : comma - pos);
            v.push_back(parseInt(item));
            if (comma == std::string_view::npos)
                break;
            pos = comma + 1;
        }
        break;
    }
    }
    if (const auto why = problem(spec, v); !why.empty())
        throw InputError({}, 0, spec.name, why);
    return v;
}

namespace detail {

OptionValues::OptionValues(
    const std::vector<OptionSpec>& specs, const json& params, std::vector<Diagnostic>& diagnostics)
    : m_specs(specs)
    , m_params(json::object())
{
    const auto fail = [&](const std::string& message) {
        diagnostics.push_back({Diagnostic::Severity::Error, "bad-option", message});
        m_ok = false;
    };
    if (params.is_null())
        return;
    if (!params.is_object()) {
        fail("algorithm options must be an object of name: value, got " + params.dump());
        return;
    }
    for (const auto& [name, v] : params.items()) {
        const auto* spec = findSpec(m_specs, name);
        if (!spec) {
            std::string known;
            for (const auto& s : m_specs)
                known += (known.empty() ? "" : ", ") + s.name;
            fail("unknown option '" + name + "'"
                + (known.empty() ? " (this algorithm has none)" : " (known: " + known + ")"));
            continue;
        }
        if (const auto why = problem(*spec, v); !why.empty()) {
            fail("option '" + name + "' " + why);
            continue;
        }
        m_params[name] = v;
    }
}

bool OptionValues::given(std::string_view name) const
{
    return m_params.contains(std::string(name));
}

bool OptionValues::has(std::string_view name) const
{
    if (given(name))
        return true;
    const auto* spec = findSpec(m_specs, name);
    return spec && !spec->default_value.is_null();
}

const json& OptionValues::value(std::string_view name) const
{
    const std::string key(name);
    if (auto it = m_params.find(key); it != m_params.end())
        return *it;
    const auto* spec = findSpec(m_specs, name);
    if (!spec)
        throw std::logic_error("option '" + key + "' is not in the algorithm's specs");
    if (spec->default_value.is_null())
        throw std::logic_error("option '" + key + "' has no value and no default");
    return spec->default_value;
}

int OptionValues::integer(std::string_view name) const
{
    return static_cast<int>(std::llround(value(name).get<double>()));
}

double OptionValues::number(std::string_view name) const
{
    return value(name).get<double>();
}

bool OptionValues::boolean(std::string_view name) const
{
    return value(name).get<bool>();
}

std::string OptionValues::choice(std::string_view name) const
{
    return value(name).get<std::string>();
}

std::vector<int> OptionValues::integers(std::string_view name) const
{
    std::vector<int> out;
    for (const auto& e : value(name))
        out.push_back(static_cast<int>(std::llround(e.get<double>())));
    return out;
}

json OptionValues::effective() const
{
    json out = json::object();
    for (const auto& s : m_specs)
        if (has(s.name))
            out[s.name] = value(s.name);
    return out;
}

} // namespace detail
} // namespace pw::planner
