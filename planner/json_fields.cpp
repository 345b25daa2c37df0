// SPDX-License-Identifier: MIT
#include "json_fields.h"

#include <cmath>
#include <limits>

namespace pw::planner::fields {

double number(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    const auto& v = required(obj, key, path);
    if (!v.is_number())
        fail(child(path, key), "expected a number, got " + std::string(v.type_name()));
    double d = v.get<double>();
    if (!std::isfinite(d))
        fail(child(path, key), "must be finite");
    return d;
}

std::optional<double> optionalNumber(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    if (!obj.contains(key) || obj.at(key).is_null())
        return std::nullopt;
    return number(obj, key, path);
}

double nonNegative(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    double d = number(obj, key, path);
    if (d < 0)
        fail(child(path, key), "must be >= 0, got " + obj.at(key).dump()); // as written, not "-80000000000.000000"
    return d;
}

double nonNegativeOr(const nlohmann::json& obj, const std::string& key, const std::string& path, double fallback)
{
    if (!obj.contains(key) || obj.at(key).is_null())
        return fallback;
    return nonNegative(obj, key, path);
}

int integer(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    const auto& v = required(obj, key, path);
    if (!v.is_number_integer()) {
        if (v.is_number_float()) {
            double d = v.get<double>();
            if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < std::numeric_limits<int>::max())
                return static_cast<int>(d);
        }
        fail(child(path, key), "expected an integer, got " + v.dump());
    }
    auto i = v.get<long long>();
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
        fail(child(path, key), "integer out of range");
    return static_cast<int>(i);
}

int integerOr(const nlohmann::json& obj, const std::string& key, const std::string& path, int fallback)
{
    if (!obj.contains(key) || obj.at(key).is_null())
        return fallback;
    return integer(obj, key, path);
}

int index(const nlohmann::json& v, const std::string& path)
{
    if (!v.is_number_integer())
        fail(path, "expected an index (an integer >= 0), got " + v.dump());
    if (v.is_number_unsigned()
            ? v.get<unsigned long long>() > static_cast<unsigned long long>(std::numeric_limits<int>::max())
            : (v.get<long long>() < 0 || v.get<long long>() > std::numeric_limits<int>::max()))
        fail(path, "index out of range: " + v.dump());
    return static_cast<int>(v.get<long long>());
}

std::string string(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    const auto& v = required(obj, key, path);
    if (!v.is_string())
        fail(child(path, key), "expected a string, got " + std::string(v.type_name()));
    return v.get<std::string>();
}

std::string stringOr(const nlohmann::json& obj, const std::string& key, const std::string& path, std::string fallback)
{
    if (!obj.contains(key) || obj.at(key).is_null())
        return fallback;
    return string(obj, key, path);
}

bool booleanOr(const nlohmann::json& obj, const std::string& key, const std::string& path, bool fallback)
{
    if (!obj.contains(key) || obj.at(key).is_null())
        return fallback;
    const auto& v = obj.at(key);
    if (!v.is_boolean())
        fail(child(path, key), "expected true or false, got " + v.dump());
    return v.get<bool>();
}

const nlohmann::json& array(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    const auto& v = required(obj, key, path);
    if (!v.is_array())
        fail(child(path, key), "expected an array, got " + std::string(v.type_name()));
    return v;
}

void checkVersion(const nlohmann::json& obj, const std::string& what, int supported)
{
    if (!obj.contains("format_version"))
        return;
    int v = integer(obj, "format_version", "");
    if (v < 1 || v > supported)
        fail("/format_version",
            what + " format version " + std::to_string(v) + " is not supported (this build reads up to "
                + std::to_string(supported) + ")");
}

} // namespace pw::planner::fields
