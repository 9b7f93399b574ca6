//! Our declarations against the real ones: the official OpenShell Python SDK (`openshell` 0.1.5
//! on PyPI) carries upstream's serialized `FileDescriptorProto`s in its `_pb2` modules. Every
//! message, field, enum value, service and method we declare must exist there identically.

use std::collections::HashMap;
use std::process::Command;

use base64::Engine;
use conformance_openshell_api::FILE_DESCRIPTOR_SET;
use conformance_testtools::{Tool, require};
use prost::Message;
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    ServiceDescriptorProto,
};

/// The SDK's descriptor modules; together they hold everything `openshell.proto` imports.
const SDK_MODULES: [&str; 4] = [
    "openshell_pb2",
    "sandbox_pb2",
    "datamodel_pb2",
    "options_pb2",
];

/// v0.0.111's delete answer, declared for the v0.0.111 CLI although 0.1.5 has no such field.
const V0_0_111_DELETED: &str = ".openshell.v1.DeleteSandboxResponse.deleted";

fn ours() -> FileDescriptorSet {
    FileDescriptorSet::decode(FILE_DESCRIPTOR_SET).expect("our descriptor set decodes")
}

/// Upstream's files as the SDK carries them, or `None` (skipped) when the SDK is not installed.
fn upstream(test: &str) -> Option<Vec<FileDescriptorProto>> {
    let sdk = require(Tool::OpenshellPythonSdk, test)?;
    let script = format!(
        "import base64, importlib\n\
         for m in {SDK_MODULES:?}:\n    \
         d = importlib.import_module('openshell._proto.' + m).DESCRIPTOR\n    \
         print(base64.b64encode(d.serialized_pb).decode())\n"
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .env("PYTHONPATH", &sdk)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "reading the SDK's descriptors failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = String::from_utf8(out.stdout)
        .expect("base64 is ASCII")
        .lines()
        .map(|l| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(l)
                .expect("base64 from python");
            FileDescriptorProto::decode(bytes.as_slice()).expect("a FileDescriptorProto")
        })
        .collect::<Vec<_>>();
    assert_eq!(files.len(), SDK_MODULES.len());
    Some(files)
}

/// Every message, enum and service of `files`, by full name (`.package.Outer.Inner`).
#[derive(Default)]
struct Index<'a> {
    messages: HashMap<String, &'a DescriptorProto>,
    enums: HashMap<String, &'a EnumDescriptorProto>,
    services: HashMap<String, &'a ServiceDescriptorProto>,
}

impl<'a> Index<'a> {
    fn of(files: &'a [FileDescriptorProto]) -> Self {
        let mut index = Index::default();
        for f in files {
            let prefix = format!(".{}", f.package());
            index.add(&prefix, &f.message_type, &f.enum_type);
            for s in &f.service {
                index.services.insert(format!("{prefix}.{}", s.name()), s);
            }
        }
        index
    }

    fn add(
        &mut self,
        prefix: &str,
        messages: &'a [DescriptorProto],
        enums: &'a [EnumDescriptorProto],
    ) {
        for e in enums {
            self.enums.insert(format!("{prefix}.{}", e.name()), e);
        }
        for m in messages {
            let name = format!("{prefix}.{}", m.name());
            self.add(&name, &m.nested_type, &m.enum_type);
            self.messages.insert(name, m);
        }
    }
}

/// The name of the oneof a field belongs to (proto3 `optional` makes a synthetic one).
fn oneof_of(m: &DescriptorProto, f: &prost_types::FieldDescriptorProto) -> Option<String> {
    f.oneof_index
        .map(|i| m.oneof_decl[i as usize].name().to_string())
}

/// Every way `ours` (only its `openshell.*` packages) is not a subset of `theirs`, one line each.
fn differences(ours: &[FileDescriptorProto], theirs: &[FileDescriptorProto]) -> Vec<String> {
    let ours_files: Vec<_> = ours
        .iter()
        .filter(|f| f.package().starts_with("openshell."))
        .cloned()
        .collect();
    let (o, t) = (Index::of(&ours_files), Index::of(theirs));
    let mut diffs = Vec::new();
    for (name, m) in &o.messages {
        let Some(up) = t.messages.get(name) else {
            diffs.push(format!("message {name}: not upstream"));
            continue;
        };
        let map_entry = |m: &DescriptorProto| m.options.as_ref().is_some_and(|o| o.map_entry());
        if map_entry(m) != map_entry(up) {
            diffs.push(format!(
                "message {name}: map entry {} upstream {}",
                map_entry(m),
                map_entry(up)
            ));
        }
        for f in &m.field {
            let Some(uf) = up.field.iter().find(|u| u.name() == f.name()) else {
                diffs.push(format!("field {name}.{}: not upstream", f.name()));
                continue;
            };
            let ours_f = (
                f.number(),
                f.r#type(),
                f.type_name(),
                f.label(),
                f.proto3_optional(),
                oneof_of(m, f),
            );
            let up_f = (
                uf.number(),
                uf.r#type(),
                uf.type_name(),
                uf.label(),
                uf.proto3_optional(),
                oneof_of(up, uf),
            );
            if ours_f != up_f {
                diffs.push(format!(
                    "field {name}.{}: ours (number, type, type name, label, proto3 optional, oneof) {ours_f:?}, upstream {up_f:?}",
                    f.name()
                ));
            }
        }
    }
    for (name, e) in &o.enums {
        let Some(up) = t.enums.get(name) else {
            diffs.push(format!("enum {name}: not upstream"));
            continue;
        };
        for v in &e.value {
            match up.value.iter().find(|u| u.name() == v.name()) {
                Some(u) if u.number() == v.number() => {}
                Some(u) => diffs.push(format!(
                    "enum value {name}.{}: ours {}, upstream {}",
                    v.name(),
                    v.number(),
                    u.number()
                )),
                None => diffs.push(format!("enum value {name}.{}: not upstream", v.name())),
            }
        }
    }
    for (name, s) in &o.services {
        let Some(up) = t.services.get(name) else {
            diffs.push(format!("service {name}: not upstream"));
            continue;
        };
        for m in &s.method {
            let Some(um) = up.method.iter().find(|u| u.name() == m.name()) else {
                diffs.push(format!("method {name}.{}: not upstream", m.name()));
                continue;
            };
            let sig = |m: &prost_types::MethodDescriptorProto| {
                (
                    m.input_type().to_string(),
                    m.output_type().to_string(),
                    m.client_streaming(),
                    m.server_streaming(),
                )
            };
            if sig(m) != sig(um) {
                diffs.push(format!(
                    "method {name}.{}: ours (input, output, client streaming, server streaming) {:?}, upstream {:?}",
                    m.name(),
                    sig(m),
                    sig(um)
                ));
            }
        }
    }
    diffs.sort();
    diffs
}

fn message_mut<'a>(files: &'a mut [FileDescriptorProto], name: &str) -> &'a mut DescriptorProto {
    files
        .iter_mut()
        .flat_map(|f| f.message_type.iter_mut())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("{name} is declared"))
}

fn field_mut<'a>(
    files: &'a mut [FileDescriptorProto],
    msg: &str,
    field: &str,
) -> &'a mut prost_types::FieldDescriptorProto {
    message_mut(files, msg)
        .field
        .iter_mut()
        .find(|f| f.name() == field)
        .unwrap_or_else(|| panic!("{msg}.{field} is declared"))
}

#[test]
fn every_declaration_exists_identically_in_the_official_sdk_descriptors() {
    let Some(theirs) =
        upstream("every_declaration_exists_identically_in_the_official_sdk_descriptors")
    else {
        return;
    };
    let ours = ours();
    // The one documented exception (docs/upstream-facts.md F7.6): v0.0.111's
    // `DeleteSandboxResponse.deleted` bool [1], which the v0.0.111 CLI needs and 0.1.5 reserves,
    // so no 0.1.5 field can be misread as it.
    assert_eq!(
        differences(&ours.file, &theirs),
        [format!("field {V0_0_111_DELETED}: not upstream")]
    );
    let up = Index::of(&theirs);
    let delete = up.messages[".openshell.v1.DeleteSandboxResponse"];
    assert!(
        delete
            .reserved_range
            .iter()
            .any(|r| r.start() <= 1 && 1 < r.end()),
        "0.1.5 must reserve field 1 of DeleteSandboxResponse: {delete:?}"
    );
    // The comparison saw what we declare: the service and its thirteen methods, by name.
    let service = ours
        .file
        .iter()
        .flat_map(|f| &f.service)
        .find(|s| s.name() == "OpenShell")
        .expect("service OpenShell");
    assert_eq!(service.method.len(), 13);
}

#[test]
fn our_descriptors_match_themselves() {
    let ours = ours().file;
    assert_eq!(differences(&ours, &ours), Vec::<String>::new());
}

#[test]
fn a_wrong_field_number_is_reported() {
    let ours = ours().file;
    let mut altered = ours.clone();
    field_mut(&mut altered, "SandboxStatus", "phase").number = Some(16);
    let diffs = differences(&altered, &ours);
    assert_eq!(diffs.len(), 1, "{diffs:#?}");
    assert!(
        diffs[0].starts_with("field .openshell.v1.SandboxStatus.phase:"),
        "{diffs:#?}"
    );
}

#[test]
fn a_wrong_field_type_is_reported() {
    let ours = ours().file;
    let mut altered = ours.clone();
    field_mut(&mut altered, "ObjectMeta", "resource_version").r#type =
        Some(prost_types::field_descriptor_proto::Type::Int64 as i32);
    field_mut(&mut altered, "Sandbox", "status").type_name =
        Some(".openshell.v1.SandboxSpec".into());
    let diffs = differences(&altered, &ours);
    assert_eq!(diffs.len(), 2, "{diffs:#?}");
    assert!(diffs[0].starts_with("field .openshell.datamodel.v1.ObjectMeta.resource_version:"));
    assert!(diffs[1].starts_with("field .openshell.v1.Sandbox.status:"));
}

#[test]
fn a_wrong_label_name_enum_value_or_streaming_flag_is_reported() {
    let ours = ours().file;
    let mut altered = ours.clone();
    field_mut(&mut altered, "ListSandboxesResponse", "sandboxes").label =
        Some(prost_types::field_descriptor_proto::Label::Optional as i32);
    field_mut(&mut altered, "ExecSandboxRequest", "sandbox").name = Some("sandbox_id".into());
    let f = altered
        .iter_mut()
        .find(|f| f.package() == "openshell.v1")
        .unwrap();
    let phase = f
        .enum_type
        .iter_mut()
        .find(|e| e.name() == "SandboxPhase")
        .unwrap();
    phase.value[2].number = Some(7);
    let watch = f.service[0]
        .method
        .iter_mut()
        .find(|m| m.name() == "WatchSandbox")
        .unwrap();
    watch.server_streaming = Some(false);
    let diffs = differences(&altered, &ours);
    let subjects: Vec<_> = diffs.iter().map(|d| d.split(':').next().unwrap()).collect();
    assert_eq!(
        subjects,
        [
            "enum value .openshell.v1.SandboxPhase.SANDBOX_PHASE_READY",
            "field .openshell.v1.ExecSandboxRequest.sandbox_id",
            "field .openshell.v1.ListSandboxesResponse.sandboxes",
            "method .openshell.v1.OpenShell.WatchSandbox",
        ],
        "{diffs:#?}"
    );
}
