// SPDX-License-Identifier: MIT
#include "errors.h"

namespace pw::planner {
namespace {
std::string format(const std::string& source, int line, const std::string& field, const std::string& message)
{
    std::string out;
    if (!source.empty()) {
        out += source;
        if (line > 0)
            out += ":" + std::to_string(line);
        out += ": ";
    } else if (line > 0) {
        out += "line " + std::to_string(line) + ": ";
    }
    if (!field.empty())
        out += field + ": ";
    out += message;
    return out;
}
} // namespace

InputError::InputError(std::string source, int line, std::string field, const std::string& message)
    : std::runtime_error(format(source, line, field, message))
    , m_source(std::move(source))
    , m_line(line)
    , m_field(std::move(field))
    , m_message(message)
{
}

InputError::InputError(const std::string& message)
    : InputError({}, 0, {}, message)
{
}

InputError InputError::inFile(const std::string& source) const
{
    return InputError(source, m_line, m_field, m_message);
}

} // namespace pw::planner
