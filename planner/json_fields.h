// SPDX-License-Identifier: MIT
// Typed field readers for every Pipewright JSON format (profiles, clusters, plans, the app's project files):
// a wrong or missing field throws InputError naming its JSON pointer, so all formats report errors alike.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "errors.h"

namespace pw::planner::fields {

/// "/layers/3" + "forward_ms" -> "/layers/3/forward_ms".
inline std::string child(const std::string& path, const std::string& key)
{
    return path + "/" + key;
}
inline std::string child(const std::string& path, std::size_t index)
{
    return path + "/" + std::to_string(index);
}

[[noreturn]] inline void fail(const std::string& path, const std::string& message)
{
    throw InputError({}, 0, path.empty() ? "/" : path, message);
}

inline const nlohmann::json& object(const nlohmann::json& j, const std::string& path)
{
    if (!j.is_object())
        fail(path, "expected an object");
    return j;
}

inline const nlohmann::json& required(const nlohmann::json& obj, const std::string& key, const std::string& path)
{
    auto it = obj.find(key);
    if (it == obj.end())
        fail(child(path, key), "missing required field");
    return *it;
}

double number(const nlohmann::json& obj, const std::string& key, const std::string& path);
std::optional<double> optionalNumber(const nlohmann::json& obj, const std::string& key, const std::string& path);
/// A finite number >= 0.
double nonNegative(const nlohmann::json& obj, const std::string& key, const std::string& path);
double nonNegativeOr(const nlohmann::json& obj, const std::string& key, const std::string& path, double fallback);
int integer(const nlohmann::json& obj, const std::string& key, const std::string& path);
int integerOr(const nlohmann::json& obj, const std::string& key, const std::string& path, int fallback);
/// An array element that must be an integer index in [0, INT_MAX].
int index(const nlohmann::json& v, const std::string& path);
std::string string(const nlohmann::json& obj, const std::string& key, const std::string& path);
std::string stringOr(const nlohmann::json& obj, const std::string& key, const std::string& path, std::string fallback);
bool booleanOr(const nlohmann::json& obj, const std::string& key, const std::string& path, bool fallback);
const nlohmann::json& array(const nlohmann::json& obj, const std::string& key, const std::string& path);
/// The value `text` names in `names` (the enum's {name, value} table); throws InputError at `field` listing the
/// names ("'x' is not one of a | b") when none does.
template <class Kind, std::size_t N>
Kind enumNamed(const std::string& text, const std::string& field, const std::pair<const char*, Kind> (&names)[N])
{
    std::string list;
    for (const auto& [n, kind] : names) {
        if (text == n)
            return kind;
        list += (list.empty() ? "" : " | ") + std::string(n);
    }
    throw InputError({}, 0, field, "'" + text + "' is not one of " + list);
}

/// The name of `kind` in `names` ("?" when the table lacks it).
template <class Kind, std::size_t N> const char* enumName(Kind kind, const std::pair<const char*, Kind> (&names)[N])
{
    for (const auto& [n, k] : names)
        if (k == kind)
            return n;
    return "?";
}

/// Checks "format_version" when present: newer than `supported` is an error.
void checkVersion(const nlohmann::json& obj, const std::string& what, int supported);

} // namespace pw::planner::fields
