// SPDX-License-Identifier: MIT
// The UI tests' main: one QApplication (offscreen unless a platform is chosen) for every widget test.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <QApplication>
#include <QStandardPaths>
#include <QTemporaryDir>

int main(int argc, char** argv)
{
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    // The run history too (app::defaultHistoryPath() follows XDG_DATA_HOME).
    QTemporaryDir data;
    qputenv("XDG_DATA_HOME", data.path().toLocal8Bit());
    // Settings and data files of the tests go to test locations, never the user's.
    QStandardPaths::setTestModeEnabled(true);
    QApplication::setOrganizationName("pipewright-tests");
    return Catch::Session().run(argc, argv);
}
