#include "vmerge/vmerge.hpp"

int main(int argc, char** argv) { return vmerge::api::command_line_main(argc, argv); }
