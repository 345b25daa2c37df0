# SPDX-License-Identifier: MIT
# Precompiled headers (docs/build.md, "Build time"). Half of a test or widget file's compile time was parsing the
# same headers again (GCC's -ftime-report on the 2-core VM: "phase parsing" 50 % of tests/planner/test_zero.cpp, 55 %
# of ui/widgets/partition_panel.cpp): Catch2's single header, nlohmann/json, Qt's widgets, the standard library. Each
# target that has many files parses them once into a PCH; its files start from it. Files still include what they
# use (a build with -DPW_PRECOMPILED_HEADERS=OFF compiles them alone: the asan preset does).
option(PW_PRECOMPILED_HEADERS "Precompile the headers most files include (standard library, JSON, Catch2, Qt)" ON)

set(PW_PCH_STD <algorithm> <cmath> <cstdint> <functional> <limits> <map> <memory> <optional> <set> <sstream>
    <string> <string_view> <utility> <vector>)
set(PW_PCH_JSON <nlohmann/json.hpp>)
set(PW_PCH_CATCH <catch2/catch.hpp>)
set(PW_PCH_QT <QApplication> <QComboBox> <QFormLayout> <QHBoxLayout> <QHeaderView> <QLabel> <QLineEdit>
    <QMessageBox> <QObject> <QPainter> <QPushButton> <QSpinBox> <QString> <QTableView> <QTimer> <QVBoxLayout>
    <QWidget>)

# pw_precompile(<target> <header>...): the C++ files of <target> start from these headers, precompiled once (CUDA
# files do not).
function(pw_precompile target)
  if(NOT PW_PRECOMPILED_HEADERS)
    return()
  endif()
  set(headers "")
  foreach(header ${ARGN})
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()
