// SPDX-License-Identifier: MIT
// Internal to pw_launch: libssh's entry points, looked up in its shared library when the first SSH session opens
// (as the engine loads OpenBLAS and cuBLASLt). Nothing links libssh: the CLI and the app start without mapping it
// and the Kerberos and GSS-API libraries it brings, whose loading and initialisation were 4 ms of every start
// (issue 30 item 10); only deploying, pre-flight and `history` of remote runs pay for them.
#pragma once

#include <libssh/libssh.h>
#include <libssh/sftp.h>

namespace pw::agents::libssh {

/// Every libssh function ssh.cpp calls, once: the loader looks each up by this name, and the API struct has a
/// member of this name with the function's own type (libssh's headers).
#define PW_LIBSSH_FUNCTIONS(X)                                                                                         \
    X(sftp_chmod)                                                                                                      \
    X(sftp_close)                                                                                                      \
    X(sftp_free)                                                                                                       \
    X(sftp_get_error)                                                                                                  \
    X(sftp_init)                                                                                                       \
    X(sftp_new)                                                                                                        \
    X(sftp_open)                                                                                                       \
    X(sftp_write)                                                                                                      \
    X(ssh_channel_close)                                                                                               \
    X(ssh_channel_free)                                                                                                \
    X(ssh_channel_get_exit_status)                                                                                     \
    X(ssh_channel_is_eof)                                                                                              \
    X(ssh_channel_is_open)                                                                                             \
    X(ssh_channel_new)                                                                                                 \
    X(ssh_channel_open_session)                                                                                        \
    X(ssh_channel_poll_timeout)                                                                                        \
    X(ssh_channel_read_nonblocking)                                                                                    \
    X(ssh_channel_request_exec)                                                                                        \
    X(ssh_channel_send_eof)                                                                                            \
    X(ssh_channel_write)                                                                                               \
    X(ssh_clean_pubkey_hash)                                                                                           \
    X(ssh_connect)                                                                                                     \
    X(ssh_disconnect)                                                                                                  \
    X(ssh_free)                                                                                                        \
    X(ssh_get_error)                                                                                                   \
    X(ssh_get_fd)                                                                                                      \
    X(ssh_get_fingerprint_hash)                                                                                        \
    X(ssh_get_publickey_hash)                                                                                          \
    X(ssh_get_server_publickey)                                                                                        \
    X(ssh_is_connected)                                                                                                \
    X(ssh_key_free)                                                                                                    \
    X(ssh_key_type)                                                                                                    \
    X(ssh_key_type_to_char)                                                                                            \
    X(ssh_known_hosts_parse_line)                                                                                      \
    X(ssh_knownhosts_entry_free)                                                                                       \
    X(ssh_new)                                                                                                         \
    X(ssh_options_get)                                                                                                 \
    X(ssh_options_get_port)                                                                                            \
    X(ssh_options_parse_config)                                                                                        \
    X(ssh_options_set)                                                                                                 \
    X(ssh_pki_import_privkey_file)                                                                                     \
    X(ssh_session_is_known_server)                                                                                     \
    X(ssh_session_update_known_hosts)                                                                                  \
    X(ssh_string_free_char)                                                                                            \
    X(ssh_userauth_publickey)                                                                                          \
    X(ssh_userauth_publickey_auto)

/// @brief libssh's functions, each a member named as the function.
struct Api
{
#define PW_LIBSSH_MEMBER(name) decltype(&::name) name = nullptr;
    PW_LIBSSH_FUNCTIONS(PW_LIBSSH_MEMBER)
#undef PW_LIBSSH_MEMBER
};

/// The library's file name (its SONAME): libssh.so.4.
const char* library();
/// The process's libssh, loaded on first use and never unloaded; throws std::runtime_error naming what is missing
/// (the library and the package that has it, or a function in it).
const Api& api();
/// Whether the library is loaded in this process (a test checks that planning and `--version` do not load it).
bool loaded();

} // namespace pw::agents::libssh
