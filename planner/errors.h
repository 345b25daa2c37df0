// SPDX-License-Identifier: MIT
// Typed errors of the planner: every input problem names its source, place and field.
#pragma once

#include <stdexcept>
#include <string>

namespace pw::planner {

/// @brief Bad user input (a file, a command-line value, a plan that cannot run).
/// what() is one line: "FILE:LINE: FIELD: message", leaving out the parts that are unknown.
class InputError : public std::runtime_error
{
public:
    InputError(std::string source, int line, std::string field, const std::string& message);
    explicit InputError(const std::string& message);

    const std::string& source() const { return m_source; }
    int line() const { return m_line; }
    const std::string& field() const { return m_field; }
    const std::string& message() const { return m_message; }

    /// The same error located in a file (keeps the line and field when already known).
    InputError inFile(const std::string& source) const;

private:
    std::string m_source;
    int m_line = 0;
    std::string m_field;
    std::string m_message;
};

/// @brief Work stopped because its caller asked (a std::stop_token): not an error of the input.
class Cancelled : public std::runtime_error
{
public:
    Cancelled()
        : std::runtime_error("cancelled")
    {
    }
};

/// The one rendering of an input error, used wherever one is shown (CLI, app, UI): "FILE:LINE: FIELD: message",
/// "line LINE: FIELD: message" without a file, leaving out the parts that are unknown. InputError::what() is
/// this text too.
std::string formatInputError(const std::string& source, int line, const std::string& field, const std::string& message);
std::string formatInputError(const InputError& error);

} // namespace pw::planner
