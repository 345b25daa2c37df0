// SPDX-License-Identifier: MIT
// main() of pipewright-cli.
#include <iostream>

#include "app/cli/cli.h"

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    return pw::cli::run(args, std::cout, std::cerr);
}
