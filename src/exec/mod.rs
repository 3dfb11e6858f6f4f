//! Reads over one snapshot: [`run`] drives a plan's operators (one module
//! each: [`scan`], [`traverse`], [`antijoin`]) over a frame of bindings,
//! then [`project`]s, [`aggregate`]s, orders and limits the rows.

mod aggregate;
mod antijoin;
pub mod blob;
pub mod cache;
mod carry;
pub mod embed;
pub mod explain;
pub mod export;
pub mod graph;
mod order;
pub mod output;
pub mod params;
mod point;
mod project;
pub mod residency;
pub mod run;
mod scan;
mod search;
mod traverse;
