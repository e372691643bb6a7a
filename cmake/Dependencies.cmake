# Third-party libraries, all from Debian packages (see `make deps`). With MMSERVE_STATIC_DEPS the archives
# are linked instead of the shared objects, so the binary runs on a host without the -dev packages (the GPU
# host); libstdc++/glibc stay dynamic (that host's are newer).
find_package(OpenMP REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(yaml-cpp REQUIRED)                                   # mmserve.yaml (serving): target yaml-cpp
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)  # api, mmserve bench: PkgConfig::HTTPLIB

function(mmserve_find_lib target header_hint)
  cmake_parse_arguments(ARG "" "" "NAMES;STATIC_NAMES;DEPS" ${ARGN})
  if(MMSERVE_STATIC_DEPS AND ARG_STATIC_NAMES)
    find_library(${target}_LIBRARY NAMES ${ARG_STATIC_NAMES} REQUIRED)
  else()
    find_library(${target}_LIBRARY NAMES ${ARG_NAMES} REQUIRED)
  endif()
  add_library(mm::${target} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(mm::${target} PROPERTIES IMPORTED_LOCATION ${${target}_LIBRARY})
  if(ARG_DEPS)
    set_target_properties(mm::${target} PROPERTIES INTERFACE_LINK_LIBRARIES "${ARG_DEPS}")
  endif()
endfunction()

# OpenBLAS (pthread variant); static needs gfortran and quadmath archives too.
if(MMSERVE_STATIC_DEPS)
  find_library(GFORTRAN_STATIC NAMES libgfortran.a PATHS /usr/lib/gcc/x86_64-linux-gnu/12 REQUIRED)
  find_library(QUADMATH_STATIC NAMES libquadmath.a PATHS /usr/lib/gcc/x86_64-linux-gnu/12 REQUIRED)
  mmserve_find_lib(openblas "" STATIC_NAMES libopenblas.a DEPS "${GFORTRAN_STATIC};${QUADMATH_STATIC};pthread;m")
else()
  mmserve_find_lib(openblas "" NAMES openblas)
endif()
find_path(CBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/x86_64-linux-gnu REQUIRED)

mmserve_find_lib(zlib "" NAMES z STATIC_NAMES libz.a)
mmserve_find_lib(jpeg "" NAMES jpeg STATIC_NAMES libjpeg.a)
mmserve_find_lib(png "" NAMES png16 STATIC_NAMES libpng16.a DEPS "mm::zlib;m")
mmserve_find_lib(webp "" NAMES webp STATIC_NAMES libwebp.a DEPS "pthread;m")
mmserve_find_lib(deflate "" NAMES deflate STATIC_NAMES libdeflate.a)  # PNG's fast path inflates IDAT with it
mmserve_find_lib(utf8proc "" NAMES utf8proc STATIC_NAMES libutf8proc.a)
mmserve_find_lib(pcre2 "" NAMES pcre2-8 STATIC_NAMES libpcre2-8.a)

# Audio (frontends/audio): libsndfile decodes WAV/FLAC/Ogg/MP3, libsamplerate resamples to 16 kHz. Debian 12
# ships neither as a static archive, nor libsndfile's own MP3 dependencies (libmpg123, libmp3lame), so both
# are linked shared even with MMSERVE_STATIC_DEPS: a host that runs a static build needs libsndfile1 and
# libsamplerate0 (and what libsndfile.so.1 pulls in: FLAC, Ogg, Vorbis, Opus, mpg123, LAME) installed or carried.
mmserve_find_lib(sndfile "" NAMES sndfile)
mmserve_find_lib(samplerate "" NAMES samplerate)
# libogg/libvorbis (installed with libsndfile1-dev) check Vorbis headers before libsndfile sees them; shared,
# because libsndfile.so.1 loads the same libraries anyway.
mmserve_find_lib(ogg "" NAMES ogg)
mmserve_find_lib(vorbis "" NAMES vorbis DEPS "mm::ogg")
