// s3:// URLs, the AWS settings chain (environment, shared files, profiles, endpoints and
// addressing) and the XML answers of the store: the pieces of the object-store input that need no
// server (tests/object_storage/ runs merges against one).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "core/error.h"
#include "io/object_url.h"
#include "io/s3_settings.h"
#include "io/s3_xml.h"

namespace vmerge {
namespace {

TEST(ObjectUrl, SplitsBucketAndKey) {
    EXPECT_TRUE(is_object_url("s3://b/k"));
    EXPECT_FALSE(is_object_url("/data/s3://b"));
    const ObjectUrl u = parse_object_url("s3://ckpt/run/global_step_5/");
    EXPECT_EQ(u.bucket, "ckpt");
    EXPECT_EQ(u.key, "run/global_step_5");
    EXPECT_EQ(u.text(), "s3://ckpt/run/global_step_5");
    EXPECT_EQ(parse_object_url("s3://ckpt").key, "");
    EXPECT_THROW(parse_object_url("s3:///key"), Error);
    EXPECT_THROW(parse_object_url("s3://b/a//c"), Error);
}

TEST(ObjectUrl, KeysWithDotSegmentsAreRefused) {
    // curl removes dot segments from a URL's path, so "run/../other" would reach "other".
    EXPECT_EQ(object_key_problem("run/global_step_5/model.safetensors"), "");
    EXPECT_EQ(object_key_problem("run/..data/.hidden"), "");
    EXPECT_EQ(object_key_problem(""), "");
    EXPECT_EQ(object_key_problem("run/"), "");  // a prefix's own folder marker
    EXPECT_NE(object_key_problem("run/../other"), "");
    EXPECT_NE(object_key_problem("run/./x"), "");
    EXPECT_NE(object_key_problem(".."), "");
    EXPECT_NE(object_key_problem("run/."), "");
    EXPECT_NE(object_key_problem("a//b"), "");
    EXPECT_NE(object_key_problem("/a"), "");
    EXPECT_THROW(parse_object_url("s3://b/run/../other"), Error);
    EXPECT_THROW(parse_object_url("s3://b/./x"), Error);
}

TEST(ObjectUrl, EncodesAsSigV4Wants) {
    EXPECT_EQ(aws_uri_encode("run 1/model-00001.safetensors~", true), "run%201/model-00001.safetensors~");
    EXPECT_EQ(aws_uri_encode("a/b=c", false), "a%2Fb%3Dc");
    EXPECT_EQ(aws_uri_encode("\xc3\xa9", true), "%C3%A9");  // upper-case hex, byte by byte
}

struct FakeEnv {
    std::map<std::string, std::string> values;
    std::function<const char*(const char*)> getter() const {
        return [this](const char* name) -> const char* {
            auto it = values.find(name);
            return it == values.end() ? nullptr : it->second.c_str();
        };
    }
};

class S3SettingsTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir = std::filesystem::temp_directory_path() / ("vmerge_s3_settings_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        env.values = {{"HOME", dir.string()}, {"AWS_CONFIG_FILE", (dir / "config").string()},
                      {"AWS_SHARED_CREDENTIALS_FILE", (dir / "credentials").string()}};
    }
    void TearDown() override { std::filesystem::remove_all(dir); }
    void write(const char* name, const std::string& text) { std::ofstream(dir / name) << text; }
    std::filesystem::path dir;
    FakeEnv env;
};

TEST_F(S3SettingsTest, EnvironmentKeysAndVirtualHostedAws) {
    env.values["AWS_ACCESS_KEY_ID"] = "AKID";
    env.values["AWS_SECRET_ACCESS_KEY"] = "secret";
    env.values["AWS_REGION"] = "eu-west-3";
    const S3Settings s = load_s3_settings(env.getter());
    EXPECT_EQ(s.access_key_id, "AKID");
    EXPECT_FALSE(s.path_style);
    EXPECT_EQ(s.base_url("ckpt"), "https://ckpt.s3.eu-west-3.amazonaws.com");
    EXPECT_EQ(s.path_prefix("ckpt"), "");
}

TEST_F(S3SettingsTest, S3EndpointBeforeGeneralOneAndPathStyle) {
    env.values["AWS_ACCESS_KEY_ID"] = "AKID";
    env.values["AWS_SECRET_ACCESS_KEY"] = "secret";
    env.values["AWS_ENDPOINT_URL"] = "http://general:1";
    env.values["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9000/";
    const S3Settings s = load_s3_settings(env.getter());
    EXPECT_TRUE(s.path_style);
    EXPECT_EQ(s.base_url("ckpt") + s.path_prefix("ckpt"), "http://127.0.0.1:9000/ckpt");
    EXPECT_EQ(s.region, "us-east-1");
    env.values["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "true";
    EXPECT_EQ(load_s3_settings(env.getter()).endpoint, "");
}

TEST_F(S3SettingsTest, NamedProfileFromTheSharedFiles) {
    write("credentials", "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = d\n\n"
                         "[train]\naws_access_key_id = TRAINKEY\naws_secret_access_key = t\naws_session_token = tok\n");
    write("config", "[default]\nregion = us-west-2\n[profile train]\nregion = ap-south-1\n"
                    "endpoint_url = https://store.example:8443\ns3 =\n  addressing_style = virtual\n");
    env.values["AWS_PROFILE"] = "train";
    const S3Settings s = load_s3_settings(env.getter());
    EXPECT_EQ(s.access_key_id, "TRAINKEY");
    EXPECT_EQ(s.session_token, "tok");
    EXPECT_EQ(s.region, "ap-south-1");  // [default] is not inherited
    EXPECT_FALSE(s.path_style);         // the profile asks for virtual-hosted even with an endpoint
    EXPECT_EQ(s.base_url("ckpt"), "https://ckpt.store.example:8443");
    EXPECT_NE(s.credentials_source.find("profile train"), std::string::npos);
}

TEST_F(S3SettingsTest, NoCredentialsSaysWhatToSet) {
    write("credentials", "[default]\naws_access_key_id = ONLYID\n");
    try {
        load_s3_settings(env.getter());
        FAIL() << "expected an Error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << e.what();
    }
    write("config", "[default]\nregion\n");
    EXPECT_THROW(load_s3_settings(env.getter()), Error);  // "expected 'name = value'", with file and line
}

TEST(S3Xml, ListingPagesAndErrors) {
    const std::string page =
        R"(<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
        "<Name>b</Name><Prefix>run/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
        "<NextContinuationToken>tok+/=</NextContinuationToken>"
        "<Contents><Key>run/a.pt</Key><Size>12</Size></Contents>"
        "<Contents><Key>run/b &amp; c.pt</Key><Size>18446744073709551615</Size></Contents>"
        "<CommonPrefixes><Prefix>run/iter_1/</Prefix></CommonPrefixes></ListBucketResult>";
    const ObjectListingPage p = parse_listing_page(page, "test");
    ASSERT_EQ(p.objects.size(), 2u);
    EXPECT_EQ(p.objects[1].key, "run/b & c.pt");
    EXPECT_EQ(p.objects[1].size, UINT64_MAX);
    EXPECT_EQ(p.common_prefixes, std::vector<std::string>{"run/iter_1/"});
    EXPECT_EQ(p.next_continuation_token, "tok+/=");
    EXPECT_THROW(parse_listing_page("<ListBucketResult><Contents><Size>x</Size></Contents></ListBucketResult>", "t"), Error);
    EXPECT_THROW(parse_listing_page("<ListBucketResult>", "t"), Error);
    EXPECT_EQ(s3_error_text("<Error><Code>NoSuchBucket</Code><Message>gone</Message></Error>"), "NoSuchBucket: gone");
    EXPECT_EQ(s3_error_text("plain text"), "");
}

// LastModified (watch's settle rule times objects by it): UTC with or without a fraction.
TEST(S3Xml, ListingLastModified) {
    const auto listed = [](const std::string& when) {
        return parse_listing_page("<ListBucketResult><Contents><Key>k</Key><Size>1</Size><LastModified>" + when +
                                      "</LastModified></Contents></ListBucketResult>",
                                  "test")
            .objects.at(0)
            .modified_seconds;
    };
    EXPECT_EQ(listed("2026-12-03T05:23:41.000Z"), 1796275421);
    EXPECT_EQ(listed("1970-01-01T00:00:10Z"), 10);
    EXPECT_THROW(listed("2026-12-03 05:23:41"), Error);
    EXPECT_THROW(listed("2026-12-03T05:23:41+01:00"), Error);
    EXPECT_THROW(listed("2026-13-03T05:23:41Z"), Error);
}

}  // namespace
}  // namespace vmerge
