# fencegate_proto_library(NAME ROOT PROTO...)
#
# Generates C++ message and gRPC code for each PROTO (paths relative to ROOT)
# into a static library NAME whose include directory is the generated tree.
function(fencegate_proto_library name root)
  set(_gen_dir ${CMAKE_CURRENT_BINARY_DIR}/${name}_gen)
  file(MAKE_DIRECTORY ${_gen_dir})
  find_program(_grpc_plugin grpc_cpp_plugin REQUIRED)
  set(_srcs)
  set(_all)
  foreach(_rel ${ARGN})
    list(APPEND _all ${root}/${_rel})
  endforeach()
  foreach(_rel ${ARGN})
    string(REGEX REPLACE "\\.proto$" "" _base ${_rel})
    set(_out ${_gen_dir}/${_base}.pb.cc ${_gen_dir}/${_base}.pb.h)
    set(_grpc_args)
    # gRPC's code only for a file that declares a service: the others'
    # .grpc.pb.cc would be empty and still cost seconds to compile.
    file(STRINGS ${root}/${_rel} _services REGEX "^service ")
    if(_services)
      list(APPEND _out ${_gen_dir}/${_base}.grpc.pb.cc
                       ${_gen_dir}/${_base}.grpc.pb.h)
      set(_grpc_args --grpc_out=${_gen_dir}
                     --plugin=protoc-gen-grpc=${_grpc_plugin})
    endif()
    add_custom_command(
      OUTPUT ${_out}
      COMMAND protobuf::protoc
        --proto_path=${root}
        --cpp_out=${_gen_dir}
        ${_grpc_args}
        ${root}/${_rel}
      # Any file of the library may import another.
      DEPENDS ${_all}
      COMMENT "protoc ${_rel}")
    list(APPEND _srcs ${_out})
  endforeach()
  add_library(${name} STATIC ${_srcs})
  # Installed (cmake/FencegateInstall.cmake): include/fencegate/v1/*.pb.h.
  target_include_directories(${name} SYSTEM PUBLIC $<BUILD_INTERFACE:${_gen_dir}>
                                            $<INSTALL_INTERFACE:include>)
  set_target_properties(${name} PROPERTIES FENCEGATE_GENERATED_DIR ${_gen_dir})
  target_link_libraries(${name} PUBLIC protobuf::libprotobuf gRPC::grpc++)
  target_compile_options(${name} PRIVATE -w)
endfunction()
