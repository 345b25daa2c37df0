# SPDX-License-Identifier: MIT
# The Debian package: everything it holds beside the programs (whose install() rules sit with their targets) and
# CPack's DEB settings. packaging/deb.sh runs `cpack -G DEB` on a build tree that was configured with this; the
# package installs under /usr (CPACK_PACKAGING_INSTALL_PREFIX), whatever CMAKE_INSTALL_PREFIX the tree has.
# docs/build.md ("The Debian package") says what is in it and what it does about CUDA.

set(pw_packaging_dir ${PROJECT_SOURCE_DIR}/packaging)
set(pw_app_id io.github.pipewright.Pipewright) # AppStream id; the desktop entry is named after it

# Debian wants compressed manual pages and changelog, made with `gzip -9n` (maximum compression, no file name or
# time stamp, so that the package's bytes depend on the text only). They are made when CMake configures, and CMake
# configures again when one of the sources changes.
function(pw_gzip_for_package source destination)
  execute_process(COMMAND gzip -9nc ${source} OUTPUT_FILE ${destination} COMMAND_ERROR_IS_FATAL ANY)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source})
endfunction()
set(pw_gz_dir ${PROJECT_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${pw_gz_dir})

# The changelog's newest entry must name this version: lintian compares them, and a package whose changelog stops
# at an older version misleads whoever reads it. Bumping project(VERSION) means adding an entry there.
file(STRINGS ${pw_packaging_dir}/debian/changelog pw_changelog_head LIMIT_COUNT 1)
if(NOT pw_changelog_head MATCHES "^pipewright \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "packaging/debian/changelog's newest entry is '${pw_changelog_head}', but the project is "
                      "version ${PROJECT_VERSION}: add an entry for ${PROJECT_VERSION} at its top")
endif()
# A version without a Debian revision makes a native package, whose changelog Debian names changelog.gz.
pw_gzip_for_package(${pw_packaging_dir}/debian/changelog ${pw_gz_dir}/changelog.gz)
install(FILES ${pw_packaging_dir}/debian/copyright ${pw_gz_dir}/changelog.gz DESTINATION share/doc/pipewright)

# One manual page per program that this tree builds (packaging/man/NAME.1, checked against --help by
# tests/packaging/test_man_pages.cpp).
foreach(program pipewright pipewright-cli pipewright-agent)
  if(TARGET ${program})
    pw_gzip_for_package(${pw_packaging_dir}/man/${program}.1 ${pw_gz_dir}/${program}.1.gz)
    install(FILES ${pw_gz_dir}/${program}.1.gz DESTINATION share/man/man1)
  endif()
endforeach()

# The desktop app's entry, icon, the MIME type of its project files and its AppStream metadata. Debian's
# shared-mime-info, desktop-file-utils and hicolor-icon-theme update their caches by dpkg triggers, so the package
# needs no maintainer scripts.
if(TARGET pipewright)
  install(FILES ${pw_packaging_dir}/linux/${pw_app_id}.desktop DESTINATION share/applications)
  install(FILES ${PROJECT_SOURCE_DIR}/resources/icons/pipewright.svg DESTINATION share/icons/hicolor/scalable/apps)
  install(FILES ${pw_packaging_dir}/linux/pipewright-mime.xml DESTINATION share/mime/packages RENAME pipewright.xml)
  install(FILES ${pw_packaging_dir}/linux/${pw_app_id}.metainfo.xml DESTINATION share/metainfo)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pipewright)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "Pipewright developers <maintainers@users.noreply.a-seed-748d34a1.example>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON) # the dev tree is RelWithDebInfo: the package carries no debug information
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                               WORLD_READ WORLD_EXECUTE) # 0755 whatever the umask
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # pipewright_VERSION_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON) # Depends from the programs' shared libraries (dpkg-shlibdeps)
# Libraries the programs load at run time rather than link, which dpkg-shlibdeps cannot see: OpenBLAS where a CPU
# trains (engine/openblas.cpp) and libssh where nodes are reached (app/launch/libssh.cpp). CPack appends the
# shlibdeps list to these.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas0, libssh-4")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "plan and train pipeline-parallel models over GPUs")
# Debian shows the description as it is: lines under 80 characters, broken here.
string(CONCAT pw_description
    "Pipewright splits a model's layers into pipeline stages over a cluster of\n"
    "devices, predicts the schedule's time, memory and bubbles with a simulator,\n"
    "and trains the plan with its own engine.\n"
    "This package holds the desktop application (pipewright), its command-line\n"
    "twin (pipewright-cli), the training agent (pipewright-agent) and the bundled\n"
    "demo projects in /usr/share/pipewright/demo.")
# A tree built with CUDA loads NVIDIA's cuBLASLt when a GPU trains (engine/cuda/cublaslt.cpp: dlopen, not linked),
# and no Debian package provides it. CPack runs dpkg-shlibdeps with
# --ignore-missing-info, so Depends lists the Debian packages only; the description says what the programs then
# need, and packaging/deb.sh refuses any other library that comes from no package. A tree configured with
# PW_WITH_CUDA=OFF (CI's, or the one docs/build.md shows for a package to hand out) needs nothing beyond Debian 12.
if(PW_HAVE_CUDA)
  find_package(CUDAToolkit REQUIRED)
  string(APPEND pw_description
         "\nThis build has the CUDA backend: training on a GPU needs NVIDIA's cuBLASLt\n"
         "${CUDAToolkit_VERSION_MAJOR} from the CUDA toolkit in the dynamic loader's path (an\n"
         "/etc/ld.so.conf.d entry), which no Debian package provides; it is loaded only then.")
endif()
set(CPACK_PACKAGE_DESCRIPTION "${pw_description}")

include(CPack)
