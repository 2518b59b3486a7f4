//! Consumer groups and their assignors: one test binary, a module per former file.

mod group_assignors;
mod groups;
mod groups_async;
mod groups_model;
mod groups_stress;
