// SPDX-License-Identifier: MIT
// InputError: one-line messages "FILE:LINE: FIELD: message".
#include "errors.h"

namespace pw::planner {

std::string formatInputError(const std::string& source, int line, const std::string& field, const std::string& message)
{
    std::string out;
    if (!source.empty()) {
        out.append(source);
        if (line > 0)
            out.append(":").append(std::to_string(line));
        out.append(": ");
    } else if (line > 0) {
        out.append("line ").append(std::to_string(line)).append(": ");
    }
    if (!field.empty())
        out.append(field).append(": ");
    out.append(message);
    return out;
}

std::string formatInputError(const InputError& error)
{
    return formatInputError(error.source(), error.line(), error.field(), error.message());
}

InputError::InputError(std::string source, int line, std::string field, const std::string& message)
    : std::runtime_error(formatInputError(source, line, field, message))
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
