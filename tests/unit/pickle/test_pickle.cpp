#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/input_file.h"
#include "pickle/pickle.h"
#include "zip/zip_archive.h"

namespace {

namespace pk = vmerge::pickle;
using pk::Kind;
using pk::Value;
using pk::ValuePtr;
using vmerge::Error;

const std::string kFixtures = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2";

std::string data_pkl(const std::string& path) {
    const vmerge::InputFile file(path);
    const vmerge::ZipArchive archive = vmerge::ZipArchive::open(file);
    return archive.read(file, archive.get("data.pkl"));
}

// Raw bytes from small integers, so opcodes and payloads read as numbers.
std::string raw(std::initializer_list<int> bytes) {
    std::string out;
    for (const int b : bytes) out.push_back(static_cast<char>(b));
    return out;
}
std::string le(uint64_t value, int width) {
    std::string out;
    for (int i = 0; i < width; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
    return out;
}
std::string binunicode(std::string_view text) {
    return "X" + le(text.size(), 4) + std::string(text);
}
std::string short_binunicode(std::string_view text) {
    return raw({0x8c}) + le(text.size(), 1) + std::string(text);
}
std::string proto(int version) { return raw({0x80, version}); }
std::string frame(const std::string& body) { return raw({0x95}) + le(body.size(), 8) + body; }

ValuePtr load(const std::string& bytes, const pk::Limits& limits = {}) {
    return pk::load(bytes, "test.pkl", limits);
}

// Loading must fail with an Error whose message contains `message_part`.
void expect_load_fails(const std::string& bytes, const std::string& message_part,
                       const pk::Limits& limits = {}) {
    try {
        load(bytes, limits);
        ADD_FAILURE() << "loaded without an error; expected: " << message_part;
    } catch (const Error& error) {
        const std::string message = error.what();
        EXPECT_EQ(message.rfind("test.pkl: ", 0), 0u) << message;
        EXPECT_NE(message.find(message_part), std::string::npos) << message;
    }
}

int64_t load_int(const std::string& body) {
    const ValuePtr value = load(proto(2) + body + ".");
    EXPECT_EQ(value->kind, Kind::Int) << pk::describe(*value);
    return value->integer;
}

TEST(Pickle, RealTorch2StateDict) {
    const std::string bytes = data_pkl(kFixtures + "/fsdp2_w3/model_world_size_3_rank_2.pt");
    const ValuePtr root = pk::load(bytes, "model_world_size_3_rank_2.pt:data.pkl");
    ASSERT_EQ(root->kind, Kind::Dict);

    const Value* embed = pk::dict_get(*root, "model.embed_tokens.weight");
    ASSERT_NE(embed, nullptr);
    ASSERT_EQ(embed->kind, Kind::Object);
    const Value* cls = pk::object_class(*embed);
    ASSERT_NE(cls, nullptr);
    EXPECT_TRUE(pk::is_global(*cls, "torch._tensor", "_rebuild_from_type_v2"));
    EXPECT_EQ(pk::describe(*embed), "torch._tensor._rebuild_from_type_v2(...)");

    // _rebuild_from_type_v2(func, DTensor, args, (None, slots)) with the local tensor in slots.
    const Value& args = *embed->args;
    ASSERT_EQ(args.kind, Kind::Tuple);
    ASSERT_EQ(args.items.size(), 4u);
    EXPECT_TRUE(pk::is_global(*args.items[0], "torch._utils", "_rebuild_wrapper_subclass"));
    EXPECT_TRUE(pk::is_global(*args.items[1], "torch.distributed.tensor", "DTensor"));
    const Value& state = *args.items[3];
    ASSERT_EQ(state.kind, Kind::Tuple);
    ASSERT_EQ(state.items.size(), 2u);
    EXPECT_EQ(state.items[0]->kind, Kind::None);
    const Value* local = pk::dict_get(*state.items[1], "_local_tensor");
    ASSERT_NE(local, nullptr);
    ASSERT_NE(pk::object_class(*local), nullptr);
    EXPECT_TRUE(pk::is_global(*pk::object_class(*local), "torch._utils", "_rebuild_tensor_v2"));
    const Value& storage = *local->args->items.at(0);
    ASSERT_EQ(storage.kind, Kind::PersistentId);
    const Value& id = *storage.args;
    ASSERT_EQ(id.kind, Kind::Tuple);
    ASSERT_EQ(id.items.size(), 5u);
    EXPECT_EQ(id.items[0]->text, "storage");
    EXPECT_TRUE(pk::is_global(*id.items[1], "torch", "FloatStorage"));
    EXPECT_EQ(id.items[2]->text, "0");
    EXPECT_EQ(id.items[3]->text, "cpu");
    EXPECT_EQ(id.items[4]->integer, 1024);

    // The OrderedDict's BUILD state carries _metadata, itself an OrderedDict.
    ASSERT_NE(root->state, nullptr);
    const Value* metadata = pk::dict_get(*root->state, "_metadata");
    ASSERT_NE(metadata, nullptr);
    ASSERT_EQ(metadata->kind, Kind::Dict);
    const Value* top_version = pk::dict_get(*metadata, "");
    ASSERT_NE(top_version, nullptr);
    EXPECT_EQ(pk::dict_get(*top_version, "version")->integer, 1);
    EXPECT_LE(root->depth, pk::Limits{}.max_depth);
}

TEST(Pickle, EveryRealTorch2PickleLoads) {
    size_t loaded = 0;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(kFixtures)) {
        if (entry.path().extension() != ".pt") continue;
        const ValuePtr root = pk::load(data_pkl(entry.path()), entry.path().string());
        EXPECT_EQ(root->kind, Kind::Dict) << entry.path();
        ++loaded;
    }
    EXPECT_GE(loaded, 15u);
}

TEST(Pickle, RealDcpMetadataProtocol4) {
    std::ifstream in(kFixtures + "/fsdp2_w2_dcp/.metadata", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.substr(0, 2), proto(4));
    const ValuePtr root = load(bytes);
    ASSERT_EQ(root->kind, Kind::Object);
    EXPECT_TRUE(root->from_newobj);
    EXPECT_EQ(pk::describe(*root), "torch.distributed.checkpoint.metadata.Metadata object");
    ASSERT_NE(root->state, nullptr);
    const Value* tensors = pk::dict_get(*root->state, "state_dict_metadata");
    ASSERT_NE(tensors, nullptr);
    const Value* embed = pk::dict_get(*tensors, "model.model.embed_tokens.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(pk::describe(*embed),
              "torch.distributed.checkpoint.metadata.TensorStorageMetadata object");
}

TEST(Pickle, Protocol2Containers) {
    // {'a': [1, (None, True, False)], 'b': <the same list>} with memo sharing.
    const std::string bytes = proto(2) + "}q" + raw({0}) + "(" + binunicode("a") + "]q" + raw({1}) +
                              "(K" + raw({1}) + "N" + raw({0x88, 0x89, 0x87}) + "e" +
                              binunicode("b") + "h" + raw({1}) + "u.";
    const ValuePtr root = load(bytes);
    ASSERT_EQ(root->kind, Kind::Dict);
    ASSERT_EQ(root->entries.size(), 2u);
    const Value* a = pk::dict_get(*root, "a");
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a->kind, Kind::List);
    ASSERT_EQ(a->items.size(), 2u);
    EXPECT_EQ(a->items[0]->integer, 1);
    const Value& tuple = *a->items[1];
    ASSERT_EQ(tuple.kind, Kind::Tuple);
    EXPECT_EQ(tuple.items[0]->kind, Kind::None);
    EXPECT_TRUE(tuple.items[1]->boolean);
    EXPECT_FALSE(tuple.items[2]->boolean);
    EXPECT_EQ(pk::dict_get(*root, "b"), a);
    EXPECT_EQ(pk::dict_get(*root, "c"), nullptr);
    EXPECT_EQ(root->depth, 4u);  // dict > list > tuple > None
}

TEST(Pickle, Protocol4FrameStackGlobalMemoize) {
    const std::string body = short_binunicode("pkg.mod") + raw({0x94}) + short_binunicode("Thing") +
                             raw({0x94, 0x93, 0x94}) + ")" + raw({0x81, 0x94}) + "}" +
                             short_binunicode("x") + "K" + raw({5}) + "s" +
                             short_binunicode("again") + "h" + raw({2}) + "sb.";
    const ValuePtr root = load(proto(4) + frame(body));
    ASSERT_EQ(root->kind, Kind::Object);
    EXPECT_TRUE(root->from_newobj);
    EXPECT_TRUE(pk::is_global(*root->callable, "pkg.mod", "Thing"));
    EXPECT_EQ(root->args->kind, Kind::Tuple);
    EXPECT_TRUE(root->args->items.empty());
    ASSERT_NE(root->state, nullptr);
    EXPECT_EQ(pk::dict_get(*root->state, "x")->integer, 5);
    EXPECT_TRUE(pk::is_global(*pk::dict_get(*root->state, "again"), "pkg.mod", "Thing"));
    EXPECT_EQ(pk::describe(*root), "pkg.mod.Thing object");
}

TEST(Pickle, Protocol5BytesAndStrings) {
    const std::string bytes = proto(5) + "](" + raw({0x96}) + le(3, 8) + "ab" + raw({0}) + "C" +
                              le(2, 1) + "xy" + "B" + le(1, 4) + "z" + raw({0x8e}) + le(0, 8) +
                              raw({0x8d}) + le(4, 8) + "\xc3\xa9\xc3\xa9" + "e.";
    const ValuePtr root = load(bytes);
    ASSERT_EQ(root->kind, Kind::List);
    ASSERT_EQ(root->items.size(), 5u);
    EXPECT_EQ(root->items[0]->kind, Kind::Bytes);
    EXPECT_EQ(root->items[0]->text, std::string("ab\0", 3));
    EXPECT_EQ(root->items[1]->text, "xy");
    EXPECT_EQ(root->items[2]->text, "z");
    EXPECT_EQ(root->items[3]->text, "");
    EXPECT_EQ(root->items[4]->kind, Kind::String);
    EXPECT_EQ(root->items[4]->text, "\xc3\xa9\xc3\xa9");
    expect_load_fails(proto(5) + raw({0x97}) + ".", "out-of-band");
    expect_load_fails(proto(5) + "N" + raw({0x98}) + ".", "out-of-band");
}

TEST(Pickle, Integers) {
    EXPECT_EQ(load_int("K" + raw({255})), 255);
    EXPECT_EQ(load_int("M" + raw({0xff, 0xff})), 65535);
    EXPECT_EQ(load_int("J" + le(0xFFFFFFFF, 4)), -1);
    EXPECT_EQ(load_int("J" + raw({0x7f, 0xff, 0xff, 0xff})), -129);
    EXPECT_EQ(load_int("J" + le(0x7FFFFFFF, 4)), 2147483647);
    EXPECT_EQ(load_int(raw({0x8a, 0})), 0);
    EXPECT_EQ(load_int(raw({0x8a, 1, 0xff})), -1);
    EXPECT_EQ(load_int(raw({0x8a, 1, 0x7f})), 127);
    EXPECT_EQ(load_int(raw({0x8a, 2, 0x00, 0x80})), -32768);
    EXPECT_EQ(load_int(raw({0x8a, 3, 0x00, 0x80, 0x00})), 32768);
    EXPECT_EQ(load_int(raw({0x8a, 5, 0x00, 0x00, 0x00, 0x80, 0x00})), 2147483648);
    EXPECT_EQ(load_int(raw({0x8a, 6, 0x01, 0x00, 0x00, 0x00, 0x00, 0xff})), -1099511627775);
    EXPECT_EQ(load_int(raw({0x8a, 7, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01})), int64_t{1} << 48);
    EXPECT_EQ(load_int(raw({0x8a, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})), INT64_MAX);
    EXPECT_EQ(load_int(raw({0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80})), INT64_MIN);
    // A non-minimal encoding of a small number is still an Int.
    EXPECT_EQ(load_int(raw({0x8a, 9, 5, 0, 0, 0, 0, 0, 0, 0, 0})), 5);
    EXPECT_EQ(load_int(raw({0x8b}) + le(2, 4) + raw({0x2c, 0x01})), 300);
}

TEST(Pickle, BigIntegers) {
    const std::string two_to_63 = raw({0, 0, 0, 0, 0, 0, 0, 0x80, 0x00});
    const std::string two_to_64 = raw({0, 0, 0, 0, 0, 0, 0, 0, 0x01});
    const std::string minus_two_to_64_minus_1 =
        raw({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe});
    for (const std::string& value : {two_to_63, two_to_64, minus_two_to_64_minus_1}) {
        const ValuePtr big = load(proto(2) + raw({0x8a, 9}) + value + ".");
        ASSERT_EQ(big->kind, Kind::BigInt);
        EXPECT_EQ(big->text, value);
        EXPECT_EQ(pk::describe(*big), "int");
    }
    const ValuePtr long4 = load(proto(2) + raw({0x8b}) + le(10, 4) + two_to_64 + raw({0}) + ".");
    ASSERT_EQ(long4->kind, Kind::BigInt);
    EXPECT_EQ(long4->text, two_to_64);
}

TEST(Pickle, Floats) {
    const ValuePtr one_and_half = load(proto(2) + "G" + raw({0x3f, 0xf8, 0, 0, 0, 0, 0, 0}) + ".");
    ASSERT_EQ(one_and_half->kind, Kind::Float);
    EXPECT_EQ(one_and_half->real, 1.5);
    EXPECT_EQ(load(proto(2) + "G" + raw({0xc0, 0x02, 0, 0, 0, 0, 0, 0}) + ".")->real, -2.25);
    EXPECT_EQ(load("F-0.125\n.")->real, -0.125);
    expect_load_fails("F1.5x\n.", "not a number");
}

TEST(Pickle, Protocol0TextForms) {
    // pickle.dumps({'a': [1, -2, 3.5, True, None, 'x\u00e9'],
    //               'b': (10**30, -10**30, "q's\n")}, 0)
    const std::string bytes =
        "(dp0\nVa\np1\n(lp2\nI1\naI-2\naF3.5\naI01\naNaVx\xe9\np3\nasVb\np4\n"
        "(L1000000000000000000000000000000L\nL-1000000000000000000000000000000L\n"
        "Vq's\\u000a\np5\ntp6\ns.";
    const ValuePtr root = load(bytes);
    ASSERT_EQ(root->kind, Kind::Dict);
    const Value& a = *pk::dict_get(*root, "a");
    ASSERT_EQ(a.items.size(), 6u);
    EXPECT_EQ(a.items[0]->integer, 1);
    EXPECT_EQ(a.items[1]->integer, -2);
    EXPECT_EQ(a.items[2]->real, 3.5);
    EXPECT_EQ(a.items[3]->kind, Kind::Bool);
    EXPECT_TRUE(a.items[3]->boolean);
    EXPECT_EQ(a.items[4]->kind, Kind::None);
    EXPECT_EQ(a.items[5]->text, "x\xc3\xa9");
    const Value& b = *pk::dict_get(*root, "b");
    ASSERT_EQ(b.kind, Kind::Tuple);
    ASSERT_EQ(b.items[0]->kind, Kind::BigInt);
    EXPECT_EQ(b.items[0]->text,
              raw({0x00, 0x00, 0x00, 0x40, 0xea, 0xed, 0x74, 0x46, 0xd0, 0x9c, 0x2c, 0x9f, 0x0c}));
    EXPECT_EQ(b.items[1]->text,
              raw({0x00, 0x00, 0x00, 0xc0, 0x15, 0x12, 0x8b, 0xb9, 0x2f, 0x63, 0xd3, 0x60, 0xf3}));
    EXPECT_EQ(b.items[2]->text, "q's\n");

    EXPECT_EQ(load("S'a\\x41\\n\\'b'\n.")->text, "aA\n'b");
    EXPECT_EQ(load("I-9223372036854775808\n.")->integer, INT64_MIN);
    EXPECT_EQ(load("L-9223372036854775809L\n.")->kind, Kind::BigInt);
    EXPECT_EQ(load("I00\n.")->kind, Kind::Bool);
    EXPECT_EQ(load(proto(2) + "T" + le(2, 4) + "hi.")->text, "hi");
    EXPECT_EQ(load(proto(2) + "U" + le(2, 1) + "yo.")->text, "yo");
    expect_load_fails("I12a\n.", "not a decimal integer");
    expect_load_fails("L" + std::string(5000, '9') + "\n.", "too long");
    expect_load_fails("S'abc\n.", "not a quoted string");
    expect_load_fails("S'\\x4'\n.", "\\x escape");
    expect_load_fails("V\\u12\n.", "\\u escape");
    expect_load_fails("V\\U00110000\n.", "U+10FFFF");
    expect_load_fails("I1", "newline");
}

TEST(Pickle, Protocol0ObjectsAndMemo) {
    // INST, OBJ, PUT/GET and PERSID text forms.
    const ValuePtr root = load(
        "(lp0\n(I1\nimod\nCls\np1\na(cmod\nOther\nI2\nop2\nag1\naPkey\nag0\n"
        "0.");
    ASSERT_EQ(root->kind, Kind::List);
    ASSERT_EQ(root->items.size(), 4u);
    const Value& inst = *root->items[0];
    EXPECT_TRUE(pk::is_global(*pk::object_class(inst), "mod", "Cls"));
    EXPECT_FALSE(inst.from_newobj);
    EXPECT_EQ(inst.args->items.at(0)->integer, 1);
    const Value& obj = *root->items[1];
    EXPECT_TRUE(pk::is_global(*pk::object_class(obj), "mod", "Other"));
    EXPECT_EQ(obj.args->items.at(0)->integer, 2);
    EXPECT_EQ(root->items[2].get(), &inst);
    ASSERT_EQ(root->items[3]->kind, Kind::PersistentId);
    EXPECT_EQ(root->items[3]->args->text, "key");
    expect_load_fails("(o.", "OBJ needs a class");
    expect_load_fails("Np-1\n.", "not a memo index");
}

TEST(Pickle, CodecsEncodeGivesBytes) {
    // pickle.dumps(b'\x00\xff abc', 2)
    const std::string bytes = proto(2) + "c_codecs\nencode\nq" + raw({0}) + "X" + le(7, 4) +
                              raw({0x00, 0xc3, 0xbf}) + " abcq" + raw({1}) + binunicode("latin1") +
                              raw({0x86}) + "R.";
    const ValuePtr value = load(bytes);
    ASSERT_EQ(value->kind, Kind::Bytes);
    EXPECT_EQ(value->text, raw({0x00, 0xff}) + " abc");
    expect_load_fails(proto(2) + "c_codecs\nencode\n" + binunicode("\xe2\x82\xac") +
                          binunicode("latin1") + raw({0x86}) + "R.",
                      "latin-1");
    // Any other encoding stays a call.
    const ValuePtr other = load(proto(2) + "c_codecs\nencode\n" + binunicode("a") +
                                binunicode("utf8") + raw({0x86}) + "R.");
    EXPECT_EQ(other->kind, Kind::Object);
}

TEST(Pickle, OrderedDictReduceBuildAndObjects) {
    const std::string ordered_dict = "ccollections\nOrderedDict\n)R";
    const std::string bytes = proto(2) + ordered_dict + "(" + binunicode("k") + "ctorch\nSize\n" +
                              "K" + raw({3}) + raw({0x85, 0x85}) + "R" + "u}" +
                              binunicode("_metadata") + ordered_dict + "sb.";
    const ValuePtr root = load(bytes);
    ASSERT_EQ(root->kind, Kind::Dict);
    const Value* size = pk::dict_get(*root, "k");
    ASSERT_NE(size, nullptr);
    ASSERT_EQ(size->kind, Kind::Object);
    EXPECT_FALSE(size->from_newobj);
    EXPECT_TRUE(pk::is_global(*size->callable, "torch", "Size"));
    EXPECT_EQ(size->args->items.at(0)->items.at(0)->integer, 3);
    EXPECT_EQ(pk::describe(*size), "torch.Size(...)");
    ASSERT_NE(root->state, nullptr);
    EXPECT_EQ(pk::dict_get(*root->state, "_metadata")->kind, Kind::Dict);
    // OrderedDict called with arguments is not an empty dict.
    EXPECT_EQ(load(proto(2) + "ccollections\nOrderedDict\n]" + raw({0x85}) + "R.")->kind,
              Kind::Object);
    expect_load_fails(proto(2) + "cm\nf\nNR.", "must be a tuple");
    expect_load_fails(proto(2) + "NN" + "b.", "BUILD needs an object");
    expect_load_fails(proto(2) + "}}b}b.", "has a state");
}

TEST(Pickle, ItemsOnObjectsPersistentIdsAndNewObjEx) {
    // REDUCE(...) followed by APPENDS and SETITEMS, as __reduce__ list/dict iterators do.
    const std::string bytes =
        proto(4) + "cm\nC\n)R(K" + raw({1}) + "K" + raw({2}) + "e(" + short_binunicode("k") + "Nu" +
        short_binunicode("s") + short_binunicode("0") + raw({0x86, 0x51, 0x85}) + "a" +
        "cm\nD\n)}" + short_binunicode("kw") + "K" + raw({7}) + "s" + raw({0x92, 0x86}) + ".";
    const ValuePtr root = load(bytes);
    ASSERT_EQ(root->kind, Kind::Tuple);
    const Value& object = *root->items.at(0);
    ASSERT_EQ(object.kind, Kind::Object);
    ASSERT_EQ(object.items.size(), 3u);  // 1, 2 and the persistent-id tuple
    EXPECT_EQ(object.items[1]->integer, 2);
    ASSERT_EQ(object.entries.size(), 1u);
    EXPECT_EQ(object.entries[0].first->text, "k");
    const Value& pid_tuple = *object.items[2];
    ASSERT_EQ(pid_tuple.kind, Kind::Tuple);
    ASSERT_EQ(pid_tuple.items[0]->kind, Kind::PersistentId);
    EXPECT_EQ(pid_tuple.items[0]->args->kind, Kind::Tuple);
    EXPECT_EQ(pk::describe(*pid_tuple.items[0]), "persistent id");
    const Value& newobj_ex = *root->items.at(1);
    EXPECT_TRUE(newobj_ex.from_newobj);
    EXPECT_TRUE(pk::is_global(*newobj_ex.callable, "m", "D"));
    ASSERT_EQ(newobj_ex.entries.size(), 1u);
    EXPECT_EQ(newobj_ex.entries[0].second->integer, 7);
}

TEST(Pickle, SetsBecomeLists) {
    const ValuePtr set =
        load(proto(4) + frame(raw({0x8f, 0x94}) + "(K" + raw({1}) + "K" + raw({2, 0x90}) + "."));
    ASSERT_EQ(set->kind, Kind::List);
    EXPECT_EQ(set->items.size(), 2u);
    const ValuePtr frozen = load(proto(4) + frame("(K" + raw({3, 0x91, 0x94}) + "."));
    ASSERT_EQ(frozen->kind, Kind::List);
    EXPECT_EQ(frozen->items.at(0)->integer, 3);
}

TEST(Pickle, StackOpcodes) {
    // DUP, POP, POP_MARK, and POP of an empty frame discarding its MARK.
    const ValuePtr root =
        load(proto(2) + "K" + raw({1}) + "2" + raw({0x86}) + "(K" + raw({9}) + "1" + "(0" + "N0.");
    ASSERT_EQ(root->kind, Kind::Tuple);
    EXPECT_EQ(root->items[0], root->items[1]);
    EXPECT_EQ(root->items[0]->integer, 1);
    expect_load_fails(proto(2) + "K" + raw({1}) + "(R.", "stack underflow");
    expect_load_fails(proto(2) + "]e.", "no MARK");
    expect_load_fails(proto(2) + "}(K" + raw({1}) + "u.", "key without a value");
    expect_load_fails(proto(2) + "K" + raw({1}) + "(.", "stack underflow");
    expect_load_fails(proto(2) + "K" + raw({1}) + "K" + raw({2}) + "a.", "needs a list");
    expect_load_fails(proto(2) + "]K" + raw({1}) + "K" + raw({2}) + "s.", "needs a dict");
    expect_load_fails(proto(4) + "K" + raw({1}) + "N" + raw({0x93}) + ".", "two strings");
}

TEST(Pickle, ErrorMessageNamesOpcodeAndOffset) {
    try {
        pk::load(proto(2) + "N" + raw({0xff}) + ".", "ckpt/x.pt:data.pkl");
        FAIL() << "unknown opcode accepted";
    } catch (const Error& error) {
        EXPECT_STREQ(error.what(),
                     "ckpt/x.pt:data.pkl: pickle opcode 0xff at byte 3: unknown opcode");
    }
    expect_load_fails(proto(2) + "R.", "pickle opcode 0x52 at byte 2: stack underflow");
    expect_load_fails(proto(2) + "j" + le(5, 4) + ".", "memo index 5 was never stored");
    expect_load_fails(proto(2) + "h" + raw({0}) + ".", "memo index 0 was never stored");
    expect_load_fails(proto(2) + ".", "stack underflow");
    expect_load_fails(proto(6) + "N.", "unsupported pickle protocol 6");
    expect_load_fails(proto(2) + raw({0x82, 1}) + ".", "extension registry");
    expect_load_fails("", "without a STOP");
    expect_load_fails(proto(2) + "N", "ends at byte 3 without a STOP");
}

TEST(Pickle, HugeLengthsFailWithoutAllocating) {
    expect_load_fails(proto(2) + "X" + le(0xFFFFFFFF, 4) + "abc.", "runs past the end");
    expect_load_fails(proto(4) + raw({0x8d}) + le(UINT64_MAX, 8) + "abc.", "runs past the end");
    expect_load_fails(proto(4) + raw({0x8e}) + le(UINT64_MAX, 8) + ".", "runs past the end");
    expect_load_fails(proto(5) + raw({0x96}) + le(UINT64_MAX - 1, 8) + ".", "runs past the end");
    expect_load_fails(proto(2) + raw({0x8b}) + le(0xFFFFFFF0, 4) + ".", "negative length");
    expect_load_fails(proto(2) + raw({0x8b}) + le(0x7FFFFFFF, 4) + ".", "runs past the end");
    expect_load_fails(proto(2) + "T" + le(0x80000000, 4) + ".", "negative length");
    expect_load_fails(proto(4) + raw({0x95}) + le(1000, 8) + "N.", "frame of 1000 bytes");
}

TEST(Pickle, NestingDepthIsBounded) {
    std::string deep = proto(2);
    constexpr int kLevels = 100000;
    for (int i = 0; i < kLevels; ++i) deep += "]";
    for (int i = 1; i < kLevels; ++i) deep += "a";
    deep += ".";
    expect_load_fails(deep, "deeper than 200 levels");

    std::string tuples = proto(2) + ")";
    for (int i = 0; i < kLevels; ++i) tuples += raw({0x85});
    expect_load_fails(tuples + ".", "deeper than 200 levels");

    pk::Limits shallow;
    shallow.max_depth = 3;
    EXPECT_EQ(load(proto(2) + "]]]aa.", shallow)->depth, 3u);
    expect_load_fails(proto(2) + "]]]]aaa.", "deeper than 3 levels", shallow);
}

TEST(Pickle, PlacedValuesCannotChange) {
    // L0 = []; L1 = []; L0.append(L1); then L1.append([]) through the memo would make L0's
    // depth stale, so it is refused.
    expect_load_fails(proto(2) + "]q" + raw({0}) + "]q" + raw({1}) + "ah" + raw({1}) + "]a.",
                      "already inside another value");
    expect_load_fails(proto(2) + "]q" + raw({0}) + "h" + raw({0}) + "a.", "cannot contain itself");
    expect_load_fails(proto(2) + "}q" + raw({0}) + "(" + binunicode("me") + "h" + raw({0}) + "u.",
                      "cannot contain itself");
    // The cycle list -> tuple -> list.
    expect_load_fails(proto(2) + "]q" + raw({0}) + "h" + raw({0}) + raw({0x85}) + "a.",
                      "already inside another value");
}

TEST(Pickle, CountLimits) {
    pk::Limits limits;
    limits.max_memo = 2;
    EXPECT_NO_THROW(
        load(proto(2) + "Nq" + raw({0}) + "q" + raw({1}) + "q" + raw({1}) + ".", limits));
    expect_load_fails(proto(2) + "Nq" + raw({0}) + "q" + raw({1}) + "q" + raw({2}) + ".",
                      "more than 2 memo entries", limits);
    limits = {};
    limits.max_values = 3;
    EXPECT_NO_THROW(load(proto(2) + "NN" + raw({0x86}) + ".", limits));
    expect_load_fails(proto(2) + "NNN" + raw({0x87}) + ".", "more than 3 values", limits);
    limits = {};
    limits.max_stack = 3;
    EXPECT_NO_THROW(load(proto(2) + "(NN" + "t.", limits));
    expect_load_fails(proto(2) + "(NNN" + "t.", "stack deeper than 3", limits);
}

TEST(Pickle, EveryTruncationFails) {
    const std::string real = data_pkl(kFixtures + "/fsdp2_w3/model_world_size_3_rank_2.pt");
    const std::string small =
        proto(4) +
        frame(short_binunicode("m") + raw({0x94}) + short_binunicode("n") + raw({0x94, 0x93}) +
              ")" + raw({0x81}) + "}" + short_binunicode("x") + "G" + le(0, 8) + "sb.");
    ASSERT_NO_THROW(load(small));
    for (const std::string* bytes : {&real, &small}) {
        for (size_t cut = 0; cut < bytes->size(); ++cut) {
            EXPECT_THROW(load(bytes->substr(0, cut)), Error) << "cut at " << cut;
        }
    }
}

TEST(Pickle, RandomMutationsOnlyFailCleanly) {
    const std::string real = data_pkl(kFixtures + "/fsdp2_w3/model_world_size_3_rank_2.pt");
    std::mt19937 random(20240601);
    size_t loaded = 0;
    for (int round = 0; round < 3000; ++round) {
        std::string mutated = real;
        const int edits = 1 + static_cast<int>(random() % 4);
        for (int e = 0; e < edits; ++e) {
            const size_t at = random() % mutated.size();
            switch (random() % 4) {
                case 0: mutated[at] = static_cast<char>(random()); break;
                case 1: mutated[at] = static_cast<char>(mutated[at] ^ (1 << (random() % 8))); break;
                case 2: mutated.insert(at, 1, static_cast<char>(random())); break;
                default: mutated.erase(at, 1); break;
            }
        }
        try {
            load(mutated);
            ++loaded;
        } catch (const Error&) {
        }
    }
    // Mutations inside strings keep the pickle valid, so some must still load.
    EXPECT_GT(loaded, 0u);
}

TEST(Pickle, Accessors) {
    Value global;
    global.kind = Kind::Global;
    global.module = "torch";
    global.name = "FloatStorage";
    EXPECT_TRUE(pk::is_global(global, "torch", "FloatStorage"));
    EXPECT_FALSE(pk::is_global(global, "torch", "HalfStorage"));
    EXPECT_EQ(pk::describe(global), "torch.FloatStorage");
    EXPECT_EQ(pk::object_class(global), nullptr);

    Value list;
    list.kind = Kind::List;
    EXPECT_EQ(pk::dict_get(list, "x"), nullptr);
    EXPECT_EQ(pk::describe(list), "list");

    Value object;
    object.kind = Kind::Object;
    EXPECT_EQ(pk::object_class(object), nullptr);
    EXPECT_EQ(pk::describe(object), "object(...)");

    // A repeated key keeps its last value.
    const ValuePtr dict = load(proto(2) + "}(" + binunicode("k") + "K" + raw({1}) +
                               binunicode("k") + "K" + raw({2}) + "u.");
    EXPECT_EQ(pk::dict_get(*dict, "k")->integer, 2);
    for (const auto& [bytes, name] : std::initializer_list<std::pair<std::string, std::string>>{
             {"N.", "None"},
             {"I01\n.", "bool"},
             {"F1\n.", "float"},
             {"S'a'\n.", "str"},
             {proto(3) + "C" + raw({0}) + ".", "bytes"},
             {")"
              ".",
              "tuple"},
             {"}.", "dict"}}) {
        EXPECT_EQ(pk::describe(*load(bytes)), name);
    }
}

}  // namespace

TEST(Pickle, GlobalNamesMustBeUtf8) {
    // A GLOBAL's module and name go into messages and the scan's JSON: Python decodes them as UTF-8.
    expect_load_fails(proto(2) + "ctorch\n\xff\xfe" + "\nN.", "text is not valid UTF-8");
    EXPECT_NO_THROW(load(proto(2) + "ctorch\nFloatStorage\n."));
}
