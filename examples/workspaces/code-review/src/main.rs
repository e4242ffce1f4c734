fn main() {
    println!("{}", review::chunks(10, 3));
}
