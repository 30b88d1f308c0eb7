//! Integration tests of the subjects, each starting its own servers: one module per subject.

mod breaking;
mod etcd;
mod faults;
mod postgres;
mod redlock;
mod support;
mod zookeeper;
