// SPDX-License-Identifier: MIT
// The UI tests' main: one QApplication (offscreen unless a platform is chosen) for every widget test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <QApplication>
#include <QTemporaryDir>

int main(int argc, char** argv)
{
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    // Settings, data files and the run history (app::defaultHistoryPath() follows XDG_DATA_HOME) go to a
    // directory of this process, never the user's, and never one that tests running in parallel share: ctest
    // runs each test case as its own process, and a layout saved by one must not reach another.
    QTemporaryDir data;
    for (const char* name : {"XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"})
        qputenv(name, (data.path() + QLatin1Char('/') + QString::fromLatin1(name)).toLocal8Bit());
    QApplication app(argc, argv);
    QApplication::setOrganizationName("pipewright-tests");
    return Catch::Session().run(argc, argv);
}
